package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Function calling and structured output in the Responses API: tools
// [{type "function", name, parameters, strict}], tool_choice ("none",
// "auto", "required", {type "function", name}), parallel_tool_calls and
// text.format ({type "text"}, {type "json_object"}, {type "json_schema",
// name, schema, strict}). Which tools are called follows the rule of
// tools.go; a call is a function_call output item {id, call_id, name,
// arguments}.

// responsesEcho is what a response object repeats of its request.
type responsesEcho struct {
	tools      json.RawMessage
	toolChoice json.RawMessage
	text       json.RawMessage
	parallel   bool
}

type responsesShapeFields struct {
	Tools             json.RawMessage `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
	Text              json.RawMessage `json:"text"`
}

// withResponsesShape applies tools, tool_choice, parallel_tool_calls and
// text.format; lastUser is the text of the last input item if it is the
// user's.
func (g genRequest) withResponsesShape(f *responsesShapeFields, lastUser string) (genRequest, *apiError) {
	specs, aerr := parseResponsesTools(f.Tools)
	if aerr != nil {
		return genRequest{}, aerr
	}
	tc, aerr := parseToolChoice(f.ToolChoice, specs)
	if aerr != nil {
		return genRequest{}, aerr
	}
	doc, aerr := responsesTextFormat(f.Text)
	if aerr != nil {
		return genRequest{}, aerr
	}
	parallel := f.ParallelToolCalls == nil || *f.ParallelToolCalls
	g.echo = &responsesEcho{tools: f.Tools, toolChoice: f.ToolChoice, text: f.Text, parallel: parallel}
	sh := shape{n: 1, format: doc, calls: pickTools(specs, tc, lastUser, parallel)}
	if g.choices, aerr = shapeChoices(sh, g.seed, true); aerr != nil {
		if aerr.param == "response_format" {
			aerr.param = "text.format"
		}
		return genRequest{}, aerr
	}
	return g, nil
}

// parseResponsesTools reads Responses tools: {type "function", name,
// parameters}.
func parseResponsesTools(raw json.RawMessage) ([]toolSpec, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var tools []struct {
		Type       string          `json:"type"`
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	}
	if json.Unmarshal(raw, &tools) != nil {
		return nil, invalidParam("tools", "Invalid 'tools': expected an array of tools like {\"type\": \"function\", \"name\": ..., \"parameters\": {...}}.")
	}
	specs := make([]toolSpec, 0, len(tools))
	for i, t := range tools {
		at := fmt.Sprintf("tools[%d]", i)
		if t.Type != "function" {
			return nil, invalidParam(at+".type", fmt.Sprintf("Invalid value for '%s.type': '%s'; the simulator serves only 'function' tools.", at, t.Type))
		}
		if !validFunctionName(t.Name) {
			return nil, invalidParam(at+".name", fmt.Sprintf(
				"Invalid '%s.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]{1,64}$', got '%s'.", at, t.Name))
		}
		spec, aerr := toolParams(t.Name, t.Parameters, at+".parameters", invalidParam)
		if aerr != nil {
			return nil, aerr
		}
		specs = append(specs, spec)
	}
	return specs, nil
}

// responsesTextFormat reads text.format, the Responses form of
// response_format (name and schema beside type, not nested).
func responsesTextFormat(raw json.RawMessage) (*schemaDoc, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var text struct {
		Format json.RawMessage `json:"format"`
	}
	if json.Unmarshal(raw, &text) != nil {
		return nil, invalidParam("text", "Invalid type for 'text': expected an object.")
	}
	f := bytes.TrimSpace(text.Format)
	if len(f) == 0 || string(f) == "null" {
		return nil, nil
	}
	var flat struct {
		Type   string          `json:"type"`
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
	}
	if json.Unmarshal(f, &flat) != nil {
		return nil, invalidParam("text.format", "Invalid type for 'text.format': expected an object.")
	}
	// Reuse the chat reader on the nested form, then rename its params.
	nested, _ := json.Marshal(map[string]any{"type": flat.Type,
		"json_schema": map[string]any{"name": flat.Name, "schema": flat.Schema}})
	if flat.Type != "json_schema" {
		nested, _ = json.Marshal(map[string]any{"type": flat.Type})
	}
	if len(flat.Schema) == 0 {
		nested = bytes.Replace(nested, []byte(`,"schema":null`), nil, 1)
	}
	doc, aerr := openAIResponseFormat(nested)
	if aerr != nil {
		// Name the Responses fields: response_format.json_schema.name is
		// text.format.name here.
		r := strings.NewReplacer("response_format.json_schema", "text.format", "response_format", "text.format")
		aerr.param, aerr.message = r.Replace(aerr.param), r.Replace(aerr.message)
	}
	return doc, aerr
}

// responsesLastUser returns the text of the last input item when it is a
// user message (the whole input when it is a string).
func responsesLastUser(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var items []struct {
		Type    string          `json:"type"`
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &items) != nil || len(items) == 0 {
		return ""
	}
	last := items[len(items)-1]
	if last.Role != "user" || (last.Type != "" && last.Type != "message") {
		return ""
	}
	text, _ := openAIContent(last.Content)
	return text
}
