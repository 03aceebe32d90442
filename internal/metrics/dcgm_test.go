package metrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
)

// The expositions below are written for these tests from NVIDIA
// dcgm-exporter's own definitions: etc/default-counters.csv
// ("DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).") and the labels
// its collector puts on every GPU series (gpu, UUID, pci_bus_id, device,
// modelName, Hostname, DCGM_FI_DRIVER_VERSION; with Kubernetes pod mapping
// also pod, namespace and container, empty for a GPU no pod holds), per
// https://docs.nvidia.com/datacenter/cloud-native/gpu-telemetry/latest/dcgm-exporter.html.

// dcgmVM is the exporter on one cloud VM with two GPUs (Hostname is the
// machine's host name: on EC2, the instance ID).
const dcgmVM = `# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1b9c6f3e-0000-0000-0000-000000000000",pci_bus_id="00000000:00:1E.0",device="nvidia0",modelName="NVIDIA A10G",Hostname="i-0abc",DCGM_FI_DRIVER_VERSION="550.54.15"} 1710
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1b9c6f3e-0000-0000-0000-000000000000",pci_bus_id="00000000:00:1E.0",device="nvidia0",modelName="NVIDIA A10G",Hostname="i-0abc",DCGM_FI_DRIVER_VERSION="550.54.15"} 80
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-2c8d7a4f-0000-0000-0000-000000000000",pci_bus_id="00000000:00:1F.0",device="nvidia1",modelName="NVIDIA A10G",Hostname="i-0abc",DCGM_FI_DRIVER_VERSION="550.54.15"} 40
`

// dcgmNode is the exporter of a Kubernetes node (a DaemonSet pod, whose
// own name is the Hostname) with GPUs allocated to two serving pods and
// one free.
const dcgmNode = `# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-aa",device="nvidia0",modelName="NVIDIA L4",Hostname="dcgm-exporter-x7k2p",container="vllm",namespace="llm",pod="chat-0"} 95
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-bb",device="nvidia1",modelName="NVIDIA L4",Hostname="dcgm-exporter-x7k2p",container="vllm",namespace="llm",pod="chat-1"} 15
DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-cc",device="nvidia2",modelName="NVIDIA L4",Hostname="dcgm-exporter-x7k2p",container="",namespace="",pod=""} 0
`

func TestParseDCGM(t *testing.T) {
	gpus, err := parseDCGM([]byte(dcgmNode), expfmt.NewFormat(expfmt.TypeTextPlain))
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 3 || gpus[0] != (dcgmGPU{Util: 0.95, Pod: "chat-0", Hostname: "dcgm-exporter-x7k2p"}) || gpus[2].Pod != "" {
		t.Errorf("gpus %+v", gpus)
	}
	if _, err := parseDCGM([]byte("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\" 1\n"), expfmt.NewFormat(expfmt.TypeTextPlain)); err == nil {
		t.Error("malformed exposition accepted")
	}
}

func TestMatchGPUs(t *testing.T) {
	vm, _ := parseDCGM([]byte(dcgmVM), expfmt.NewFormat(expfmt.TypeTextPlain))
	node, _ := parseDCGM([]byte(dcgmNode), expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, tc := range []struct {
		name      string
		gpus      []dcgmGPU
		id, host  string
		perTarget bool
		util      float64
		n         int
	}{
		{"by Hostname = instance ID, mean of its GPUs", vm, "i-0abc", "10.0.0.5", false, 0.6, 2},
		{"by Hostname = IP", []dcgmGPU{{Util: 0.3, Hostname: "10.0.0.5"}, {Util: 0.9, Hostname: "10.0.0.6"}}, "x", "10.0.0.5", false, 0.3, 1},
		{"another host on a shared exporter", vm, "i-0def", "10.0.0.6", false, 0, 0},
		{"the instance's own exporter: all its GPUs", vm, "lp-1", "127.0.0.1", true, 0.6, 2},
		{"by pod on a node exporter", node, "chat-1", "10.1.0.7", true, 0.15, 1},
		{"a pod of another node's GPUs is not taken", node, "chat-9", "10.1.0.8", false, 0, 0},
		{"nothing", nil, "a", "b", true, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			util, n := matchGPUs(tc.gpus, tc.id, tc.host, tc.perTarget)
			if n != tc.n || math.Abs(util-tc.util) > 1e-9 {
				t.Errorf("(%v, %d); want (%v, %d)", util, n, tc.util, tc.n)
			}
		})
	}
}

func FuzzParseDCGM(f *testing.F) {
	f.Add([]byte(dcgmVM))
	f.Add([]byte(dcgmNode))
	f.Add([]byte("DCGM_FI_DEV_GPU_UTIL -5\nDCGM_FI_DEV_GPU_UTIL{gpu=\"1\"} NaN\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		gpus, err := parseDCGM(b, expfmt.NewFormat(expfmt.TypeTextPlain))
		if err != nil {
			return
		}
		for _, g := range gpus {
			if !(g.Util >= 0 && g.Util <= 1) {
				t.Fatalf("utilisation %v outside 0..1", g.Util)
			}
		}
	})
}

// TestDCGMAddsGPUUtilToScrapedBackends: two vLLM-style backends scraped
// directly, GPU utilisation from dcgm-exporter (a real HTTP server serving
// the exposition above) read through a per-instance URL template, and an
// instance whose exporter is down named in the error while its other
// metrics stay.
func TestDCGMAddsGPUUtilToScrapedBackends(t *testing.T) {
	vllm := func(q int) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(fmt.Sprintf("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting %d\n", q)))
		}))
	}
	a, b := vllm(1), vllm(2)
	defer a.Close()
	defer b.Close()
	exporters := map[string]string{"a": dcgmVM}
	dcgm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := exporters[r.URL.Query().Get("id")]
		if !ok {
			http.Error(w, "no such node", http.StatusBadGateway)
			return
		}
		_, _ = w.Write([]byte(body))
	}))
	defer dcgm.Close()

	src, err := NewDCGM(NewScrape(ScrapeOptions{}), DCGMOptions{URL: dcgm.URL + "/metrics?id={{.ID}}"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if src.Name() != "scrape+dcgm" {
		t.Errorf("Name %q", src.Name())
	}
	snap, err := src.Snapshot(context.Background(), []Target{{ID: "a", Address: a.Listener.Addr().String()}, {ID: "b", Address: b.Listener.Addr().String()}})
	var te *TargetError
	if !errors.As(err, &te) || te.Failed["b"] == nil || te.Failed["a"] != nil || !strings.Contains(err.Error(), "502") {
		t.Fatalf("err %v; want b's exporter named", err)
	}
	if m := snap["a"]; m.Has&FieldGPUUtil == 0 || math.Abs(m.GPUUtil-0.6) > 1e-9 || m.QueueDepth != 1 {
		t.Errorf("a: %+v; want GPU 0.6 (mean of 80 %% and 40 %%) and queue 1", m)
	}
	if m := snap["b"]; m.Has&FieldGPUUtil != 0 || m.QueueDepth != 2 {
		t.Errorf("b: %+v; want queue 2 and no GPU", m)
	}

	// Alone, on a shared exporter: matched by Hostname.
	exporters["shared"] = dcgmVM
	alone, err := NewDCGM(nil, DCGMOptions{URL: dcgm.URL + "/metrics?id=shared"})
	if err != nil {
		t.Fatal(err)
	}
	snap, err = alone.Snapshot(context.Background(), []Target{{ID: "i-0abc", Address: "10.0.0.5:8000"}, {ID: "i-0def", Address: "10.0.0.6:8000"}})
	if m := snap["i-0abc"]; m.Has != FieldGPUUtil || math.Abs(m.GPUUtil-0.6) > 1e-9 || m.ObservedAt.IsZero() {
		t.Errorf("i-0abc: %+v", m)
	}
	if err == nil || !strings.Contains(err.Error(), "i-0def") || !strings.Contains(err.Error(), MetricDCGMGPUUtil) {
		t.Errorf("err %v; want i-0def named as without GPU series", err)
	}
}

func TestNewDCGMValidates(t *testing.T) {
	for _, u := range []string{"", "ftp://x", "http://{{.Nope}}:9400", "http://{{.IP"} {
		if _, err := NewDCGM(nil, DCGMOptions{URL: u}); err == nil {
			t.Errorf("NewDCGM(%q) accepted", u)
		}
	}
}
