package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Tool calling. A request offers tools (functions with a JSON Schema of
// their parameters); the simulated model calls some of them, with
// arguments generated from the parameters schema, instead of answering in
// text. Which ones is deterministic:
//
//   - tool_choice "none": none (text answer);
//   - tool_choice naming a function: that function;
//   - "auto" (the default, and Ollama, which has no tool_choice): every
//     offered tool whose name the last message mentions, when that message
//     is the user's (case-insensitive substring); after a tool result the
//     model answers in text;
//   - "required": as auto, and the first tool when none is mentioned;
//   - parallel_tool_calls false: at most the first of those.

// toolSpec is one offered function.
type toolSpec struct {
	name   string
	params *schemaDoc // nil: no parameters ("{}" arguments)
}

// toolChoice is a parsed tool_choice.
type toolChoice struct {
	mode string // "auto", "none", "required" or "function"
	name string // mode "function"
}

// validFunctionName reports whether name matches OpenAI's
// ^[a-zA-Z0-9_-]{1,64}$.
func validFunctionName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// functionTool is a tool in the shape Ollama and OpenAI chat share:
// {"type": "function", "function": {"name", "description", "parameters"}}.
type functionTool struct {
	Type     string `json:"type"`
	Function *struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// parseTools reads a tools array in the chat shape; errors are OpenAI's,
// naming the parameter, when openAI is set, else Ollama's.
func parseTools(raw json.RawMessage, openAI bool) ([]toolSpec, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	fail := func(param, msg string) *apiError {
		if openAI {
			return invalidParam(param, msg)
		}
		return badRequest("%s", msg)
	}
	var tools []functionTool
	if json.Unmarshal(raw, &tools) != nil {
		return nil, fail("tools", "Invalid 'tools': expected an array of tools like {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": {...}}}.")
	}
	specs := make([]toolSpec, 0, len(tools))
	for i, t := range tools {
		at := fmt.Sprintf("tools[%d]", i)
		if t.Type != "function" && (openAI || t.Type != "") {
			return nil, fail(at+".type", fmt.Sprintf("Invalid value for '%s.type': '%s'; the simulator serves only 'function' tools.", at, t.Type))
		}
		if t.Function == nil {
			return nil, fail(at+".function", fmt.Sprintf("Missing required parameter: '%s.function'.", at))
		}
		name := t.Function.Name
		if openAI && !validFunctionName(name) {
			return nil, fail(at+".function.name", fmt.Sprintf(
				"Invalid '%s.function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]{1,64}$', got '%s'.", at, name))
		}
		if name == "" {
			return nil, fail(at+".function.name", fmt.Sprintf("Missing required parameter: '%s.function.name'.", at))
		}
		spec, aerr := toolParams(name, t.Function.Parameters, at+".function.parameters", fail)
		if aerr != nil {
			return nil, aerr
		}
		specs = append(specs, spec)
	}
	return specs, nil
}

// toolParams reads a function's parameters schema, which must describe an
// object.
func toolParams(name string, raw json.RawMessage, param string, fail func(param, msg string) *apiError) (toolSpec, *apiError) {
	spec := toolSpec{name: name}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return spec, nil
	}
	doc, err := parseSchema(raw)
	if err != nil {
		return spec, fail(param, fmt.Sprintf("Invalid schema for function '%s': %v", name, err))
	}
	if k := doc.root.kind(); doc.root.boolean == nil && doc.root.ref == "" && len(doc.root.allOf) == 0 && k != "object" {
		return spec, fail(param, fmt.Sprintf(
			"Invalid schema for function '%s': schema must be a JSON Schema of 'type: \"object\"', got 'type: \"%s\"'.", name, k))
	}
	spec.params = doc
	return spec, nil
}

// parseToolChoice reads OpenAI chat's tool_choice: "none", "auto",
// "required" or {"type": "function", "function": {"name"}}.
func parseToolChoice(raw json.RawMessage, tools []toolSpec) (toolChoice, *apiError) {
	raw = bytes.TrimSpace(raw)
	tc := toolChoice{mode: "auto"}
	if len(raw) == 0 || string(raw) == "null" {
		return tc, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "none", "auto", "required":
			tc.mode = s
		default:
			return tc, invalidParam("tool_choice", fmt.Sprintf(
				"Invalid value: '%s'. Supported values are: 'none', 'auto', and 'required'.", s))
		}
	} else {
		var obj struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
			Name string `json:"name"` // Responses API shape
		}
		if json.Unmarshal(raw, &obj) != nil || obj.Type != "function" {
			return tc, invalidParam("tool_choice", "Invalid 'tool_choice': expected 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}.")
		}
		tc.mode, tc.name = "function", obj.Function.Name
		if tc.name == "" {
			tc.name = obj.Name
		}
		if tc.name == "" {
			return tc, invalidParam("tool_choice.function.name", "Missing required parameter: 'tool_choice.function.name'.")
		}
	}
	if tc.mode != "none" && tc.mode != "auto" && len(tools) == 0 {
		return tc, invalidParam("tool_choice", "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.")
	}
	if tc.mode == "function" {
		found := false
		for _, t := range tools {
			found = found || t.name == tc.name
		}
		if !found {
			return tc, invalidParam("tool_choice", fmt.Sprintf(
				"Invalid value for 'tool_choice': function '%s' is not among the 'tools'.", tc.name))
		}
	}
	return tc, nil
}

// pickTools applies the rule above: the tools the answer calls, given
// the text of the last message (empty when it is not the user's).
func pickTools(tools []toolSpec, tc toolChoice, lastUser string, parallel bool) []toolSpec {
	var out []toolSpec
	switch tc.mode {
	case "none":
		return nil
	case "function":
		for _, t := range tools {
			if t.name == tc.name {
				return []toolSpec{t}
			}
		}
		return nil
	}
	lower := strings.ToLower(lastUser)
	for _, t := range tools {
		if lastUser != "" && strings.Contains(lower, strings.ToLower(t.name)) {
			out = append(out, t)
		}
	}
	if len(out) == 0 && tc.mode == "required" && len(tools) > 0 {
		out = tools[:1]
	}
	if !parallel && len(out) > 1 {
		out = out[:1]
	}
	return out
}
