package sim

import (
	"encoding/json"
	"fmt"
)

// The per-API readers of what an answer should be (see format.go and
// tools.go); each returns g with its choices and logprobs set.

// withOllamaShape applies Ollama's format, tools and logprobs fields.
func (g genRequest) withOllamaShape(format, tools json.RawMessage, lastUser string, lp ollamaLogprobs) (genRequest, *apiError) {
	doc, aerr := ollamaFormat(format)
	if aerr != nil {
		return genRequest{}, aerr
	}
	specs, aerr := parseTools(tools, false)
	if aerr != nil {
		return genRequest{}, aerr
	}
	if lp.TopLogprobs < 0 || lp.TopLogprobs > 20 {
		return genRequest{}, badRequest("top_logprobs must be between 0 and 20")
	}
	g.logprobs, g.topLogprobs = lp.Logprobs, lp.TopLogprobs
	sh := shape{n: 1, format: doc, calls: pickTools(specs, toolChoice{mode: "auto"}, lastUser, true)}
	if g.choices, aerr = shapeChoices(sh, g.seed, false); aerr != nil {
		return genRequest{}, aerr
	}
	return g, nil
}

// withOpenAIChatShape applies n, tools, tool_choice, parallel_tool_calls,
// response_format, logprobs and top_logprobs.
func (g genRequest) withOpenAIChatShape(req *openAIChatRequest, lastUser string) (genRequest, *apiError) {
	n, aerr := openAIChoiceCount(req.N)
	if aerr != nil {
		return genRequest{}, aerr
	}
	doc, aerr := openAIResponseFormat(req.ResponseFormat)
	if aerr != nil {
		return genRequest{}, aerr
	}
	specs, aerr := parseTools(req.Tools, true)
	if aerr != nil {
		return genRequest{}, aerr
	}
	tc, aerr := parseToolChoice(req.ToolChoice, specs)
	if aerr != nil {
		return genRequest{}, aerr
	}
	g.logprobs = req.Logprobs != nil && *req.Logprobs
	if g.topLogprobs, aerr = openAITopLogprobs(g.logprobs, req.TopLogprobs); aerr != nil {
		return genRequest{}, aerr
	}
	parallel := req.ParallelToolCalls == nil || *req.ParallelToolCalls
	sh := shape{n: n, format: doc, calls: pickTools(specs, tc, lastUser, parallel)}
	if g.choices, aerr = shapeChoices(sh, g.seed, true); aerr != nil {
		return genRequest{}, aerr
	}
	return g, nil
}

// withOpenAICompletionShape applies n and logprobs (an integer, 0 to 5:
// the alternatives listed per token).
func (g genRequest) withOpenAICompletionShape(req *openAICompletionRequest) (genRequest, *apiError) {
	n, aerr := openAIChoiceCount(req.N)
	if aerr != nil {
		return genRequest{}, aerr
	}
	if req.Logprobs != nil {
		if *req.Logprobs < 0 || *req.Logprobs > 5 {
			return genRequest{}, invalidParam("logprobs", fmt.Sprintf(
				"Invalid 'logprobs': expected a value between 0 and 5, but got %d instead.", *req.Logprobs))
		}
		g.logprobs, g.topLogprobs = true, int(*req.Logprobs)
	}
	if g.choices, aerr = shapeChoices(shape{n: n}, g.seed, true); aerr != nil {
		return genRequest{}, aerr
	}
	return g, nil
}

// shapeChoices writes out the choices of sh, as an API error if the
// schemas cannot be satisfied.
func shapeChoices(sh shape, seed int, openAI bool) ([]choicePlan, *apiError) {
	choices, err := sh.choices(seed)
	if err == nil {
		if aerr := checkAnswerSize(choices); aerr != nil {
			return nil, aerr
		}
		return choices, nil
	}
	if openAI {
		param := "response_format"
		if len(sh.calls) > 0 {
			param = "tools"
		}
		return nil, invalidParam(param, "Cannot generate the requested output: "+err.Error())
	}
	return nil, badRequest("cannot generate the requested output: %v", err)
}
