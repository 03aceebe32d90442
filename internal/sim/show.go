package sim

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// chatTemplate is the prompt template /api/show reports (ChatML). The
// simulator does not render prompts; the template is there for clients
// that read it.
const chatTemplate = `{{ if .System }}<|im_start|>system
{{ .System }}<|im_end|>
{{ end }}{{ range .Messages }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}<|im_start|>assistant
`

// ollamaShowResponse is the answer of POST /api/show.
type ollamaShowResponse struct {
	Modelfile    string             `json:"modelfile"`
	Parameters   string             `json:"parameters"`
	Template     string             `json:"template"`
	Details      ollamaModelDetails `json:"details"`
	ModelInfo    map[string]any     `json:"model_info"`
	Capabilities []string           `json:"capabilities"`
	ModifiedAt   time.Time          `json:"modified_at"`
}

// handleShow serves POST /api/show: {model} (or the deprecated {name}) ->
// modelfile, parameters, template, details, model_info and capabilities.
// model_info carries the architecture keys clients read: the context
// length and, as <arch>.embedding_length, the embedding dimension.
func (s *Server) handleShow(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model string `json:"model"`
		Name  string `json:"name"`
	}
	if aerr := readJSON(w, r, &req); aerr != nil {
		writeError(w, apiOllama, aerr)
		return
	}
	name := req.Model
	if name == "" {
		name = req.Name
	}
	if name == "" {
		writeError(w, apiOllama, badRequest("model is required"))
		return
	}
	model, ok := s.lookup(name)
	if !ok {
		writeError(w, apiOllama, &apiError{status: http.StatusNotFound,
			message: fmt.Sprintf("model '%s' not found", name)})
		return
	}
	writeJSON(w, http.StatusOK, s.show(model))
}

// show describes a configured model.
func (s *Server) show(model string) ollamaShowResponse {
	mi := describeModel(model)
	params := fmt.Sprintf("%-30s %d\n%-30s %d\n%-30s %q",
		"num_ctx", contextLength, "num_predict", s.cfg.OutputTokens, "stop", "<|im_end|>")
	var mf strings.Builder
	fmt.Fprintf(&mf, "# Modelfile of a model simulated by tidegpu sim (no weights behind it)\n")
	fmt.Fprintf(&mf, "FROM %s\n", model)
	fmt.Fprintf(&mf, "TEMPLATE \"\"\"%s\"\"\"\n", chatTemplate)
	fmt.Fprintf(&mf, "PARAMETER num_ctx %d\n", contextLength)
	fmt.Fprintf(&mf, "PARAMETER num_predict %d\n", s.cfg.OutputTokens)
	fmt.Fprintf(&mf, "PARAMETER stop %q\n", "<|im_end|>")
	arch := mi.family
	info := map[string]any{
		"general.architecture":         arch,
		"general.file_type":            15, // Q4_K_M
		"general.quantization_version": 2,
		arch + ".context_length":       contextLength,
		arch + ".embedding_length":     s.cfg.embeddingDim(),
	}
	if mi.parameterCount > 0 {
		info["general.parameter_count"] = mi.parameterCount
	}
	return ollamaShowResponse{
		Modelfile:    mf.String(),
		Parameters:   params,
		Template:     chatTemplate,
		Details:      mi.details(),
		ModelInfo:    info,
		Capabilities: []string{"completion", "embedding"},
		ModifiedAt:   s.started,
	}
}
