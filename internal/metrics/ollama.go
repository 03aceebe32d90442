package metrics

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// OllamaPSPath is Ollama's list of the models loaded in memory
// (https://docs.ollama.com/api/ps).
const OllamaPSPath = "/api/ps"

// maxPSBytes bounds an /api/ps answer.
const maxPSBytes = 1 << 20

// OllamaOptions configure an Ollama source. The zero value is valid.
type OllamaOptions struct {
	// Timeout bounds one backend's /api/ps; default 1s.
	Timeout time.Duration
	// Client carries the requests; nil means one that ignores proxies.
	Client *http.Client
	// Clock stamps the readings; nil means the real clock.
	Clock clock.PassiveClock
}

// Ollama is the Source for Ollama backends, which serve no /metrics: for
// each target the wrapped source has no metrics of, it reads GET /api/ps,
// and a backend that answers it is an Ollama server: its loaded models are
// its reading (BackendMetrics.Loaded), and the wrapped source's failure for
// it is no error (its load is the gateway's own count). A target that
// answers neither is still the wrapped source's error.
type Ollama struct {
	inner   Source
	timeout time.Duration
	client  *http.Client
	clock   clock.PassiveClock
}

var _ Source = (*Ollama)(nil)

// NewOllama returns an Ollama source over inner (nil: /api/ps only).
func NewOllama(inner Source, o OllamaOptions) *Ollama {
	s := &Ollama{inner: inner, timeout: o.Timeout, client: o.Client, clock: o.Clock}
	if s.timeout <= 0 {
		s.timeout = DefaultScrapeTimeout
	}
	if s.client == nil {
		s.client = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2}}
	}
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	return s
}

// Name is the wrapped source's name (the Ollama part adds no signal the
// balancer weighs), or "ollama" alone.
func (s *Ollama) Name() string {
	if s.inner == nil {
		return "ollama"
	}
	return s.inner.Name()
}

// Close closes the wrapped source.
func (s *Ollama) Close() {
	if s.inner != nil {
		s.inner.Close()
	}
}

// Snapshot implements Source.
func (s *Ollama) Snapshot(ctx context.Context, targets []Target) (map[string]BackendMetrics, error) {
	var out map[string]BackendMetrics
	var err error
	if s.inner != nil {
		out, err = s.inner.Snapshot(ctx, targets)
	}
	if out == nil {
		out = map[string]BackendMetrics{}
	}
	var ask []Target
	for _, t := range targets {
		if _, ok := out[t.ID]; !ok && t.ID != "" && t.Address != "" {
			ask = append(ask, t)
		}
	}
	if len(ask) == 0 {
		return out, err
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	ollama := map[string]bool{}
	psErr := map[string]error{}
	for _, t := range ask {
		wg.Go(func() {
			models, perr := s.ps(ctx, t)
			mu.Lock()
			defer mu.Unlock()
			if perr != nil {
				psErr[t.ID] = perr
				return
			}
			ollama[t.ID] = true
			out[t.ID] = BackendMetrics{Loaded: models, Has: FieldLoaded, Family: "ollama", ObservedAt: s.clock.Now()}
		})
	}
	wg.Wait()
	if s.inner == nil {
		if len(psErr) > 0 {
			return out, &TargetError{Source: "ollama", Failed: psErr, Total: len(byIDs(targets))}
		}
		return out, nil
	}
	return out, forgive(err, ollama)
}

// forgive removes the targets in ok from err's failures: nil if none is
// left. An error of the whole source (not a TargetError) stays.
func forgive(err error, ok map[string]bool) error {
	var te *TargetError
	if err == nil || len(ok) == 0 || !errors.As(err, &te) {
		return err
	}
	left := make(map[string]error, len(te.Failed))
	for id, e := range te.Failed {
		if !ok[id] {
			left[id] = e
		}
	}
	if len(left) == 0 {
		return nil
	}
	return &TargetError{Source: te.Source, Failed: left, Total: te.Total}
}

// ps reads one backend's /api/ps.
func (s *Ollama) ps(ctx context.Context, t Target) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+t.Address+OllamaPSPath, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return nil, fmt.Errorf("%s: status %s", OllamaPSPath, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPSBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxPSBytes {
		return nil, fmt.Errorf("%s: answer larger than %d bytes", OllamaPSPath, maxPSBytes)
	}
	return ParseOllamaPS(body)
}

// ParseOllamaPS reads an /api/ps answer, {"models": [{"name", "model",
// ...}]}, and returns the loaded models' names (model, else name). An
// answer without a models list is not Ollama's. Pure.
func ParseOllamaPS(body []byte) ([]string, error) {
	var ps struct {
		Models *[]struct {
			Name  string `json:"name"`
			Model string `json:"model"`
		} `json:"models"`
	}
	if err := json.Unmarshal(body, &ps); err != nil {
		return nil, fmt.Errorf("%s: %w", OllamaPSPath, err)
	}
	if ps.Models == nil {
		return nil, fmt.Errorf("%s: no models list: not an Ollama server", OllamaPSPath)
	}
	out := make([]string, 0, len(*ps.Models))
	for _, m := range *ps.Models {
		name := m.Model
		if name == "" {
			name = m.Name
		}
		if name != "" {
			out = append(out, name)
		}
	}
	return out, nil
}
