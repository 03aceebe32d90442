package metrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"text/template"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"k8s.io/utils/clock"
)

// MetricDCGMGPUUtil is NVIDIA dcgm-exporter's GPU utilisation gauge, in
// percent (0-100), one series per GPU (labels gpu, UUID, device,
// modelName, Hostname and, in Kubernetes, the pod, namespace and container
// the GPU is allocated to).
const MetricDCGMGPUUtil = "DCGM_FI_DEV_GPU_UTIL"

// DCGMOptions configure a DCGM source.
type DCGMOptions struct {
	// URL is the dcgm-exporter metrics URL of a target, a text/template
	// over {{.IP}} (the host of the target's address), {{.ID}} (its
	// instance ID) and {{.Port}}: http://{{.IP}}:9400/metrics reads the
	// exporter on each instance's own node. A URL without fields is one
	// exporter for every target (its series are matched to the targets by
	// label). Required.
	URL string
	// Timeout bounds the read of one exporter; default 1s.
	Timeout time.Duration
	// Client carries the reads; nil means one that ignores proxies.
	Client *http.Client
	// Clock stamps the values of targets the wrapped source has none of;
	// nil means the real clock.
	Clock clock.PassiveClock
}

// DCGM is the Source that adds GPU utilisation from NVIDIA dcgm-exporter to
// another source's metrics (or alone, with none): the mean over the GPUs
// matched to a target, as a fraction. A GPU series belongs to a target if
// its pod label is the target's ID, else if its Hostname label is the
// target's ID or the host of its address; an exporter read through a
// per-target URL (one with template fields) that matches neither way is
// taken as the target's own node, all of its GPUs. A target with no GPU
// series is named in a *TargetError.
type DCGM struct {
	inner     Source
	url       *template.Template
	perTarget bool
	timeout   time.Duration
	client    *http.Client
	clock     clock.PassiveClock
}

var _ Source = (*DCGM)(nil)

// dcgmURLData are the fields of DCGMOptions.URL.
type dcgmURLData struct{ IP, ID, Port string }

// NewDCGM checks o and returns a DCGM source adding to inner (nil: GPU
// utilisation only).
func NewDCGM(inner Source, o DCGMOptions) (*DCGM, error) {
	if strings.TrimSpace(o.URL) == "" {
		return nil, errors.New("dcgm source: no URL: give the dcgm-exporter URL, such as http://{{.IP}}:9400/metrics")
	}
	t, err := template.New("dcgm").Option("missingkey=error").Parse(o.URL)
	if err != nil {
		return nil, fmt.Errorf("dcgm source: URL %q: %w", o.URL, err)
	}
	probe, err := renderDCGM(t, dcgmURLData{IP: "192.0.2.1", ID: "i-probe", Port: "1"})
	if err != nil || !(strings.HasPrefix(probe, "http://") || strings.HasPrefix(probe, "https://")) {
		return nil, fmt.Errorf("dcgm source: URL %q: want an http(s) URL, optionally with {{.IP}}, {{.ID}} or {{.Port}}", o.URL)
	}
	other, _ := renderDCGM(t, dcgmURLData{IP: "192.0.2.2", ID: "i-other", Port: "2"})
	d := &DCGM{inner: inner, url: t, perTarget: probe != other, timeout: o.Timeout, client: o.Client, clock: o.Clock}
	if d.timeout <= 0 {
		d.timeout = DefaultScrapeTimeout
	}
	if d.client == nil {
		d.client = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2}}
	}
	if d.clock == nil {
		d.clock = clock.RealClock{}
	}
	return d, nil
}

func renderDCGM(t *template.Template, data dcgmURLData) (string, error) {
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return "", err
	}
	return b.String(), nil
}

// Name is the wrapped source's name with "+dcgm", or "dcgm" alone.
func (d *DCGM) Name() string {
	if d.inner == nil {
		return "dcgm"
	}
	return d.inner.Name() + "+dcgm"
}

// Close closes the wrapped source.
func (d *DCGM) Close() {
	if d.inner != nil {
		d.inner.Close()
	}
}

// Snapshot takes the wrapped source's snapshot and adds each target's GPU
// utilisation, reading each distinct exporter URL once. Without a wrapped
// source, a target gets an entry of its GPU utilisation alone; with one,
// only targets the wrapped source has metrics of get it.
func (d *DCGM) Snapshot(ctx context.Context, targets []Target) (map[string]BackendMetrics, error) {
	var out map[string]BackendMetrics
	var innerErr error
	if d.inner != nil {
		out, innerErr = d.inner.Snapshot(ctx, targets)
	}
	if out == nil {
		out = map[string]BackendMetrics{}
	}
	urls := map[string]string{} // target ID → URL
	failed := map[string]error{}
	for _, t := range targets {
		if t.ID == "" {
			continue
		}
		host, port, _ := net.SplitHostPort(t.Address)
		u, err := renderDCGM(d.url, dcgmURLData{IP: host, ID: t.ID, Port: port})
		if err != nil {
			failed[t.ID] = fmt.Errorf("dcgm URL for %s: %w", t.ID, err)
			continue
		}
		urls[t.ID] = u
	}
	type answer struct {
		gpus []dcgmGPU
		err  error
	}
	answers := map[string]*answer{}
	for _, u := range urls {
		answers[u] = &answer{}
	}
	var wg sync.WaitGroup
	for u, a := range answers {
		wg.Go(func() { a.gpus, a.err = d.read(ctx, u) })
	}
	wg.Wait()
	now := d.clock.Now()
	for _, t := range targets {
		u, ok := urls[t.ID]
		if !ok {
			continue
		}
		a := answers[u]
		if a.err != nil {
			failed[t.ID] = fmt.Errorf("dcgm exporter %s for %s: %w", u, t.ID, a.err)
			continue
		}
		host, _, _ := net.SplitHostPort(t.Address)
		util, n := matchGPUs(a.gpus, t.ID, host, d.perTarget)
		if n == 0 {
			failed[t.ID] = fmt.Errorf("dcgm exporter %s: no %s series for %s (pod or Hostname label %q or %q)", u, MetricDCGMGPUUtil, t.ID, t.ID, host)
			continue
		}
		m, have := out[t.ID]
		if !have && d.inner != nil {
			continue // the wrapped source's error says why
		}
		if !have {
			m.ObservedAt = now
		}
		m.set(FieldGPUUtil, util)
		out[t.ID] = m
	}
	var err error
	if len(failed) > 0 {
		err = &TargetError{Source: "dcgm", Failed: failed, Total: len(byIDs(targets))}
	}
	return out, errors.Join(innerErr, err)
}

// read reads one exporter's GPU utilisation series.
func (d *DCGM) read(ctx context.Context, u string) ([]dcgmGPU, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", acceptText)
	resp, err := d.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, DefaultScrapeMaxBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > DefaultScrapeMaxBytes {
		return nil, fmt.Errorf("answer larger than %d bytes", DefaultScrapeMaxBytes)
	}
	return parseDCGM(body, expfmt.ResponseFormat(resp.Header))
}

// dcgmGPU is one GPU's utilisation series.
type dcgmGPU struct {
	// Util is the utilisation as a fraction 0..1.
	Util float64
	// Pod and Hostname are the series' labels ("" if absent).
	Pod, Hostname string
}

// parseDCGM reads dcgm-exporter's exposition and returns its GPU
// utilisation series, percent turned into fractions. Series with an
// unusable value are left out. Pure.
func parseDCGM(body []byte, format expfmt.Format) ([]dcgmGPU, error) {
	if format.FormatType() == expfmt.TypeUnknown {
		format = expfmt.NewFormat(expfmt.TypeTextPlain)
	}
	dec := expfmt.NewDecoder(bytes.NewReader(body), format)
	var out []dcgmGPU
	for {
		mf := &dto.MetricFamily{}
		err := dec.Decode(mf)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("parsing dcgm-exporter metrics: %w", err)
		}
		if mf.GetName() != MetricDCGMGPUUtil {
			continue
		}
		for _, x := range mf.GetMetric() {
			var v float64
			switch {
			case x.GetGauge() != nil:
				v = x.GetGauge().GetValue()
			case x.GetUntyped() != nil:
				v = x.GetUntyped().GetValue()
			default:
				continue
			}
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				continue
			}
			g := dcgmGPU{Util: min(v/100, 1)}
			for _, l := range x.GetLabel() {
				switch l.GetName() {
				case "pod":
					g.Pod = l.GetValue()
				case "Hostname", "hostname":
					g.Hostname = l.GetValue()
				}
			}
			out = append(out, g)
		}
	}
	return out, nil
}

// matchGPUs returns the mean utilisation of the GPUs that belong to target
// id at host and how many there are: those allocated to pod id; else those
// whose Hostname is id or host; else, for an exporter read through the
// target's own URL, all of them. Pure.
func matchGPUs(gpus []dcgmGPU, id, host string, perTarget bool) (float64, int) {
	mean := func(keep func(dcgmGPU) bool) (float64, int) {
		var sum float64
		n := 0
		for _, g := range gpus {
			if keep(g) {
				sum += g.Util
				n++
			}
		}
		if n == 0 {
			return 0, 0
		}
		return sum / float64(n), n
	}
	if u, n := mean(func(g dcgmGPU) bool { return id != "" && g.Pod == id }); n > 0 {
		return u, n
	}
	if u, n := mean(func(g dcgmGPU) bool { return g.Hostname != "" && (g.Hostname == id || g.Hostname == host) }); n > 0 {
		return u, n
	}
	if perTarget {
		return mean(func(dcgmGPU) bool { return true })
	}
	return 0, 0
}
