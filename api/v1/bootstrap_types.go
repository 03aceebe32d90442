package v1

// Bootstrap templates (BootstrapSpec.Template).
const (
	// BootstrapOllama installs and starts Ollama, pulls spec.bootstrap.model
	// and loads it before the instance answers its readiness probe.
	BootstrapOllama = "ollama"
	// BootstrapVLLM starts vLLM's OpenAI server for spec.bootstrap.model
	// with spec.bootstrap.args; /health answers once the model is loaded.
	BootstrapVLLM = "vllm"
	// BootstrapNone sends spec.bootstrap.userData as it is.
	BootstrapNone = "none"
)

// BootstrapSpec is the user data (cloud-init) the operator renders for each
// instance on AWS and Tencent Cloud: it installs and starts `tidegpu
// agent` (with the operator's notice URL and the pool's notice token) and
// the inference server. The token is written to a root-only file on the
// instance and never echoed by the script.
// +kubebuilder:validation:XValidation:rule="self.template != 'none' || (has(self.userData) && size(self.userData) > 0)",message="spec.bootstrap.userData: required with template none: give the cloud-init document to send, or choose template ollama or vllm"
// +kubebuilder:validation:XValidation:rule="self.template == 'none' || (has(self.model) && size(self.model) > 0)",message="spec.bootstrap.model: required with templates ollama and vllm: name the model to serve, such as qwen2:0.5b or Qwen/Qwen2.5-0.5B-Instruct"
type BootstrapSpec struct {
	// Template chooses the built-in user data: ollama, vllm or none.
	// +kubebuilder:validation:Enum=ollama;vllm;none
	Template string `json:"template"`

	// Model to serve: an Ollama model to pull (qwen2:0.5b) or a vLLM model
	// (Qwen/Qwen2.5-0.5B-Instruct). Required with ollama and vllm.
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$`
	// +optional
	Model string `json:"model,omitempty"`

	// Args are extra arguments of `vllm serve` (vllm only), such as
	// ["--max-model-len", "4096"]; each is shell-quoted.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=1024
	// +optional
	Args []string `json:"args,omitempty"`

	// AgentURL is an https URL to download the tidegpu binary from when the
	// image does not have it at /usr/local/bin/tidegpu; AgentSHA256 its
	// hex SHA-256, checked before it runs. Empty: the image has it (see
	// the Packer template in deploy/packer).
	// +kubebuilder:validation:Pattern=`^https://`
	// +optional
	AgentURL string `json:"agentURL,omitempty"`

	// AgentSHA256 is the hex SHA-256 of the binary at AgentURL.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	// +optional
	AgentSHA256 string `json:"agentSHA256,omitempty"`

	// UserData is sent as it is with template none (its size is checked
	// against the cloud's limit). It must not hold secrets: user data is
	// readable through the cloud's API and its metadata service.
	// +kubebuilder:validation:MaxLength=16384
	// +optional
	UserData string `json:"userData,omitempty"`
}
