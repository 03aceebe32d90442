package usage

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/tidegpu/tidegpu/internal/admin"
	"github.com/tidegpu/tidegpu/internal/cost"
	"github.com/tidegpu/tidegpu/internal/events"
	"github.com/tidegpu/tidegpu/internal/gateway"
	"github.com/tidegpu/tidegpu/internal/market"
	"github.com/tidegpu/tidegpu/internal/sim"
)

// accountingCase is one kind of request: truth asks the simulator straight
// for what it generates (its own usage fields, read with the official SDK
// or Ollama's documented fields); through sends the same request through
// the gateway as a client would and checks what the client saw.
type accountingCase struct {
	name    string
	through func(t *testing.T, base string)
	truth   func(t *testing.T, base string) (prompt, completion int64)
}

const accModel = "qwen2:0.5b"

func oaClient(base string) *openai.Client {
	c := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	return &c
}

func chatParams(includeUsage bool) openai.ChatCompletionNewParams {
	p := openai.ChatCompletionNewParams{Model: accModel, MaxTokens: openai.Int(11),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("How many tokens is this, please?")}}
	if includeUsage {
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	}
	return p
}

// chatStream streams a chat and returns the usage chunks the client got.
func chatStream(t *testing.T, base string, includeUsage bool) (openai.CompletionUsage, int) {
	st := oaClient(base).Chat.Completions.NewStreaming(context.Background(), chatParams(includeUsage))
	var u openai.CompletionUsage
	n := 0
	for st.Next() {
		if ch := st.Current(); len(ch.Choices) == 0 {
			u, n = ch.Usage, n+1
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	return u, n
}

func respParams() responses.ResponseNewParams {
	return responses.ResponseNewParams{Model: accModel, MaxOutputTokens: openai.Int(13),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Say something short.")}}
}

func respStream(t *testing.T, base string) responses.ResponseUsage {
	st := oaClient(base).Responses.NewStreaming(context.Background(), respParams())
	var u responses.ResponseUsage
	for st.Next() {
		if ev := st.Current(); ev.Type == "response.completed" || ev.Type == "response.incomplete" { // incomplete: cut by max_output_tokens
			u = ev.Response.Usage
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

// ollama posts body to path and returns the last NDJSON line's counts
// (Ollama docs/api.md: prompt_eval_count, eval_count on the final object).
func ollama(t *testing.T, base, path, body string) (int64, int64) {
	resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
	}
	var last struct {
		PromptEvalCount int64 `json:"prompt_eval_count"`
		EvalCount       int64 `json:"eval_count"`
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 {
			last.PromptEvalCount, last.EvalCount = 0, 0
			if err := json.Unmarshal(line, &last); err != nil {
				t.Fatalf("%s: %v in %q", path, err, line)
			}
		}
	}
	return last.PromptEvalCount, last.EvalCount
}

var accountingCases = []accountingCase{
	{"chat stream without include_usage",
		func(t *testing.T, base string) {
			if _, n := chatStream(t, base, false); n != 0 {
				t.Fatalf("the client without include_usage got %d usage chunks", n)
			}
		},
		func(t *testing.T, base string) (int64, int64) {
			u, _ := chatStream(t, base, true)
			return u.PromptTokens, u.CompletionTokens
		}},
	{"chat stream with include_usage",
		func(t *testing.T, base string) {
			if u, n := chatStream(t, base, true); n != 1 || u.CompletionTokens == 0 {
				t.Fatalf("the client with include_usage got %d usage chunks, %+v", n, u)
			}
		},
		func(t *testing.T, base string) (int64, int64) {
			u, _ := chatStream(t, base, true)
			return u.PromptTokens, u.CompletionTokens
		}},
	{"chat whole answer",
		func(t *testing.T, base string) {
			if _, err := oaClient(base).Chat.Completions.New(context.Background(), chatParams(false)); err != nil {
				t.Fatal(err)
			}
		},
		func(t *testing.T, base string) (int64, int64) {
			r, err := oaClient(base).Chat.Completions.New(context.Background(), chatParams(false))
			if err != nil {
				t.Fatal(err)
			}
			return r.Usage.PromptTokens, r.Usage.CompletionTokens
		}},
	{"completions stream without include_usage",
		func(t *testing.T, base string) {
			st := oaClient(base).Completions.NewStreaming(context.Background(), openai.CompletionNewParams{
				Model: accModel, MaxTokens: openai.Int(7), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon")}})
			for st.Next() {
				if st.Current().Usage.TotalTokens != 0 {
					t.Fatal("the client without include_usage got usage")
				}
			}
			if err := st.Err(); err != nil {
				t.Fatal(err)
			}
		},
		func(t *testing.T, base string) (int64, int64) {
			r, err := oaClient(base).Completions.New(context.Background(), openai.CompletionNewParams{
				Model: accModel, MaxTokens: openai.Int(7), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon")}})
			if err != nil {
				t.Fatal(err)
			}
			return r.Usage.PromptTokens, r.Usage.CompletionTokens
		}},
	{"responses stream",
		func(t *testing.T, base string) {
			if u := respStream(t, base); u.OutputTokens == 0 {
				t.Fatalf("no usage in response.completed: %+v", u)
			}
		},
		func(t *testing.T, base string) (int64, int64) {
			u := respStream(t, base)
			return u.InputTokens, u.OutputTokens
		}},
	{"responses whole answer",
		func(t *testing.T, base string) {
			if _, err := oaClient(base).Responses.New(context.Background(), respParams()); err != nil {
				t.Fatal(err)
			}
		},
		func(t *testing.T, base string) (int64, int64) {
			r, err := oaClient(base).Responses.New(context.Background(), respParams())
			if err != nil {
				t.Fatal(err)
			}
			return r.Usage.InputTokens, r.Usage.OutputTokens
		}},
	{"openai embeddings",
		func(t *testing.T, base string) {
			if _, err := oaClient(base).Embeddings.New(context.Background(), embParams()); err != nil {
				t.Fatal(err)
			}
		},
		func(t *testing.T, base string) (int64, int64) {
			r, err := oaClient(base).Embeddings.New(context.Background(), embParams())
			if err != nil {
				t.Fatal(err)
			}
			return r.Usage.PromptTokens, 0
		}},
	{"ollama chat stream",
		func(t *testing.T, base string) { ollama(t, base, "/api/chat", ollamaChat) },
		func(t *testing.T, base string) (int64, int64) { return ollama(t, base, "/api/chat", ollamaChat) }},
	{"ollama embed",
		func(t *testing.T, base string) { ollama(t, base, "/api/embed", ollamaEmbed) },
		func(t *testing.T, base string) (int64, int64) { return ollama(t, base, "/api/embed", ollamaEmbed) }},
}

const (
	ollamaChat  = `{"model":"qwen2:0.5b","messages":[{"role":"user","content":"hello there"}],"options":{"num_predict":6}}`
	ollamaEmbed = `{"model":"qwen2:0.5b","input":["one sentence","and another one"]}`
)

func embParams() openai.EmbeddingNewParams {
	return openai.EmbeddingNewParams{Model: accModel,
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"alpha beta", "gamma"}}}
}

// newTestLedger returns a ledger that knows instance id of pool "chat".
func newTestLedger(t *testing.T, id string) *cost.Ledger {
	t.Helper()
	l := cost.NewLedger(cost.Options{})
	info := cost.InstanceInfo{ID: id, Pool: "chat", Provider: "aws", Region: "us-east-1", Zone: "us-east-1a",
		InstanceType: "g5.xlarge", Market: market.Spot}
	start := time.Now().Add(-time.Minute)
	eff, list, err := (&cost.Resolver{Catalog: market.DefaultCatalog()}).Prices(info.Query(), start)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(info, start, eff, list); err != nil {
		t.Fatal(err)
	}
	return l
}

// ledgerTokens is what the ledger holds of pool "chat", model accModel.
func ledgerTokens(l *cost.Ledger) (prompt, completion int64) {
	for _, r := range l.Report("chat", cost.Window{To: time.Now().Add(time.Hour)}) {
		for _, m := range r.Models {
			if m.Model == accModel {
				prompt, completion = prompt+int64(m.PromptTokens), completion+int64(m.CompletionTokens)
			}
		}
	}
	return prompt, completion
}

// Every kind of answer's tokens reach the ledger exactly, once: straight
// (`tidegpu up`: the recorder writes the ledger) and through a Reporter to
// the operator's admin API and its Ingest (a standalone replica).
func TestTokensReachTheLedgerExactly(t *testing.T) {
	for _, path := range []string{"direct", "reported"} {
		t.Run(path, func(t *testing.T) {
			s := sim.New(sim.Config{TTFT: -1, TokenTime: -1, InstanceID: "i-1"})
			backend := httptest.NewServer(s)
			t.Cleanup(func() { backend.Close(); s.Close() })
			ledger := newTestLedger(t, "i-1")
			rec := &Recorder{}
			var rep *Reporter
			switch path {
			case "direct":
				rec.Sink = func(id, model string, p, c int64) { ledger.AddTokens(id, model, p, c, time.Now()) }
			case "reported":
				op := httptest.NewServer(admin.NewHandler(admin.Options{Pools: noPools{}, Events: events.NewRecorder(10, nil, nil),
					Ledger: ledger, Usage: NewIngest(ledger, nil, nil), Token: "s3cret"}))
				t.Cleanup(op.Close)
				var err error
				rep, err = NewReporter(ReporterOptions{URL: op.URL, Token: "s3cret", Name: "gw-0", Interval: 20 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { defer close(done); rep.Run(ctx) }()
				t.Cleanup(func() { cancel(); <-done })
				rec.Sink = rep.Add
			}
			gw, err := gateway.New(gateway.Options{ProbeInterval: -1, WaitForBackend: -1, OnUsage: rec.StreamUsage})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(gw.Close)
			rec.Next = gw
			gw.SetBackends("chat", []gateway.Backend{{ID: "i-1", Pool: "chat", Address: strings.TrimPrefix(backend.URL, "http://")}})
			front := httptest.NewServer(rec)
			t.Cleanup(front.Close)

			var wantP, wantC int64
			for _, tc := range accountingCases {
				p, c := tc.truth(t, backend.URL)
				if p <= 0 {
					t.Fatalf("%s: the simulator generated %d prompt tokens", tc.name, p)
				}
				tc.through(t, front.URL)
				wantP, wantC = wantP+p, wantC+c
				// The recorder reads the tail once the gateway's handler has
				// returned, which may be after the client read the end; a
				// reported batch arrives within an interval.
				deadline := time.Now().Add(5 * time.Second)
				for {
					gp, gc := ledgerTokens(ledger)
					if gp == wantP && gc == wantC {
						break
					}
					if time.Now().After(deadline) || gp > wantP || gc > wantC {
						t.Fatalf("%s: ledger holds %d prompt, %d completion tokens; the simulator generated %d, %d in all so far",
							tc.name, gp, gc, wantP, wantC)
					}
					time.Sleep(5 * time.Millisecond)
				}
				t.Logf("%s: %d prompt + %d completion tokens, ledger exact", tc.name, p, c)
			}
			if rep != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := rep.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				if gp, gc := ledgerTokens(ledger); gp != wantP || gc != wantC {
					t.Fatalf("after flush: %d, %d; want %d, %d", gp, gc, wantP, wantC)
				}
			}
		})
	}
}
