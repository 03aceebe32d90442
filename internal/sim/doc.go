// Package sim is an inference backend simulator that speaks the Ollama and
// OpenAI HTTP APIs.
//
// A [Server] behaves like one GPU serving one or more language models: every
// request waits in a FIFO queue for one of Config.MaxBatch batch slots, spends
// a prefill delay (time to first token) and then emits deterministic words at
// a per-token pace that slows down as more sequences decode at once. The
// latency math is a pure function of the configuration and the number of
// running sequences; serving uses real wall time, so real clients (the
// official Ollama and OpenAI SDKs, load generators, a gateway in front of a
// pool of simulators) see realistic streaming behaviour.
//
// Served endpoints:
//
//	GET  /                      "Ollama is running"
//	POST /api/chat              Ollama chat (NDJSON streaming by default)
//	POST /api/generate          Ollama generate (NDJSON streaming by default)
//	GET  /api/tags              Ollama model list
//	GET  /api/ps                Ollama running models
//	POST /api/show              Ollama model information
//	POST /api/embed             Ollama embeddings (input: string or []string)
//	POST /api/embeddings        Ollama legacy embedding (prompt: string)
//	GET  /api/version           Ollama version
//	POST /v1/chat/completions   OpenAI chat completions (SSE when stream=true)
//	POST /v1/completions        OpenAI legacy completions (SSE when stream=true)
//	POST /v1/embeddings         OpenAI embeddings (float or base64)
//	POST /v1/responses          OpenAI Responses (semantic SSE events when stream=true)
//	GET  /v1/models             OpenAI model list
//	GET  /v1/models/{model}     OpenAI model
//	GET  /metrics               Prometheus metrics with vLLM names
//	GET  /healthz               readiness: 200 while serving, 503 after Close
//
// Answers are deterministic: a short poem cycled word by word, one word per
// token, starting at a position derived from the prompt. Prompt tokens are
// estimated as a quarter of the prompt's bytes (at least 1). Ollama's final
// chunk reports total_duration (arrival to last token), load_duration (time
// queued for a batch slot), prompt_eval_duration (prefill), eval_count and
// eval_duration (first to last token). A client that disconnects stops its
// generation and frees its slot or queue place at once.
//
// Structured answers: Ollama format ("json" or a JSON schema), OpenAI
// response_format (json_object, json_schema) and Responses text.format give
// JSON content, a value generated to satisfy the schema (schema.go); tools
// give tool calls whose arguments satisfy the function's parameters, the
// called tools chosen by a fixed rule on tool_choice and the last user
// message (tools.go); OpenAI n gives n choices decoded side by side in one
// batch slot; logprobs are deterministic. A structured answer is written out
// when the request is parsed and emitted token by token at the same pace as
// text, so the reported usage is exactly the tokens sent (format.go).
//
// Every error is in the shape of the API it came through: OpenAI's
// {"error": {"message", "type", "param", "code"}} under /v1, Ollama's
// {"error": "..."} under /api, including unknown routes (404) and wrong
// methods (405 with Allow), so SDKs report them as their API errors; a
// value of the wrong type names its field.
//
// Embeddings are deterministic: Config.EmbeddingDim Gaussian values from a
// generator seeded by the SHA-256 of the text, scaled to unit L2 norm, so
// equal texts always get equal vectors (and unequal texts unrelated ones).
// They are answered at once, outside the batch queue and the metrics, so
// they do not change the load a gateway or autoscaler sees.
//
// Metrics use the names and the model_name label of vLLM
// (vllm:num_requests_running, vllm:num_requests_waiting,
// vllm:kv_cache_usage_perc, vllm:time_to_first_token_seconds,
// vllm:time_per_output_token_seconds, vllm:e2e_request_latency_seconds,
// vllm:request_queue_time_seconds, vllm:prompt_tokens_total,
// vllm:generation_tokens_total, vllm:request_success_total) plus
// tidegpu_sim_gpu_utilization and tidegpu_sim_info{instance_id}. They live in
// a registry of their own, so several simulators can run in one process.
// An idle simulator's metrics do not change from one scrape to the next, as
// an idle vLLM's do not: the smoothed utilization reads the share of busy
// slots exactly once within half a percent of it (0 at rest, as a GPU
// utilization meter reports in whole percents), not a tail decaying for
// minutes.
package sim
