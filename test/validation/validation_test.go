// Package validation_test runs one table of TidePool documents through the
// two places a spec is validated: a real kube-apiserver (envtest) with the
// generated CRD (OpenAPI schema and CEL rules from api/v1), and `tidegpu
// up`'s loader (config.Parse, which applies internal/validation). Every
// invalid document must be refused by both, each naming the field; every
// valid one accepted by both. A rule CEL cannot express is marked
// apiServer: false, with the reason.
package validation_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/tidegpu/tidegpu/internal/config"
	"github.com/tidegpu/tidegpu/test/testbin"
)

// k8s is nil when KUBEBUILDER_ASSETS is unset: the API server half skips.
var k8s client.Client

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		fmt.Println(`validation: KUBEBUILDER_ASSETS is unset: the API server half is skipped; run with KUBEBUILDER_ASSETS="$(hack/envtest.sh)" (or make test)`)
		return m.Run()
	}
	env, cfg, took, err := testbin.StartAPIServer(assets)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Stop()
	fmt.Printf("envtest: kube-apiserver and etcd up in %s\n", took.Round(time.Millisecond))
	if k8s, err = client.New(cfg, client.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// invalid is a document both sides must refuse.
type invalid struct {
	name string
	// spec is the document's spec (YAML, two-space indented under spec:).
	spec string
	// field is the path the error must name (a prefix of the loader's
	// where the API server names the list, as for CEL rules on a list).
	field string
	// apiServer is false for a rule CEL cannot express: the API server
	// accepts the document, only `tidegpu up` refuses it. why says why.
	apiServer bool
	why       string
	// unknown: a field the schema does not know (a strict decoding error,
	// 400, rather than 422).
	unknown bool
}

// base is prepended to a case's spec unless the case sets minimum itself.
const base = "provider: local\nminimum: 1\nmaximum: 4\n"

// awsBase and tencentBase are bases for cloud-only fields.
const (
	awsBase     = "provider: aws\nregion: us-east-1\nminimum: 1\nmaximum: 4\n"
	tencentBase = "provider: tencent\nregion: ap-singapore\nminimum: 1\nmaximum: 4\n"
)

func both(name, field, spec string) invalid {
	return invalid{name: name, spec: spec, field: field, apiServer: true}
}

func upOnly(name, field, spec, why string) invalid {
	return invalid{name: name, spec: spec, field: field, apiServer: false, why: why}
}

var invalidCases = []invalid{
	// Size.
	both("minimum above maximum", "spec.minimum", "provider: local\nminimum: 5\nmaximum: 4\n"),
	both("negative minimum", "spec.minimum", "provider: local\nminimum: -1\nmaximum: 4\n"),
	both("maximum above 1000", "spec.maximum", "provider: local\nminimum: 1\nmaximum: 1001\n"),
	both("replicas above maximum", "spec.replicas", base+"replicas: 9\n"),
	both("replicas below minimum", "spec.replicas", "provider: local\nminimum: 2\nmaximum: 4\nreplicas: 1\n"),
	// Provider, credentials, endpoints.
	both("unknown provider", "spec.provider", "provider: gcp\nminimum: 1\nmaximum: 4\n"),
	both("sim without spec.sim", "spec.sim", "provider: sim\nminimum: 1\nmaximum: 4\n"),
	both("sim with an empty traceDir", "spec.sim.traceDir", "provider: sim\nminimum: 1\nmaximum: 4\nsim: {traceDir: \"\"}\n"),
	both("sim compression negative", "spec.sim.compression", "provider: sim\nminimum: 1\nmaximum: 4\nsim: {traceDir: t, compression: -1}\n"),
	both("sim notice negative", "spec.sim.noticeSeconds", "provider: sim\nminimum: 1\nmaximum: 4\nsim: {traceDir: t, noticeSeconds: -1}\n"),
	both("unknown charge type", "spec.instanceChargeType", base+"instanceChargeType: PREPAID\n"),
	both("inline secretId", "spec.secretId", base+"secretId: hunter2\n"),
	both("inline secretKey", "spec.secretKey", base+"secretKey: hunter2\n"),
	both("credentials secret without a name", "spec.credentialsSecretRef.name", base+"credentialsSecretRef: {name: \"\"}\n"),
	both("endpoint not a URL", "spec.endpoint", base+"endpoint: cvm.tencentcloudapi.com\n"),
	both("kongGatewayIP a URL path", "spec.kongGatewayIP", base+"kongGatewayIP: \"192.0.2.10/admin\"\n"),
	both("kong adminURL not a URL", "spec.kong.adminURL", base+"kong: {adminURL: \"kong:8001\"}\n"),
	both("kong token secret without a key", "spec.kong.tokenSecretRef.key", base+"kong: {tokenSecretRef: {name: kong, key: \"\"}}\n"),
	// Serving, draining, local.
	both("port above 65535", "spec.serving.port", base+"serving: {port: 70000}\n"),
	both("readiness path without /", "spec.serving.readinessPath", base+"serving: {readinessPath: healthz}\n"),
	both("bootstrap on a local pool", "spec.bootstrap", base+"bootstrap: {template: ollama, model: qwen2}\n"),
	both("bootstrap template unknown", "spec.bootstrap.template", awsBase+"bootstrap: {template: docker, model: m}\n"),
	both("bootstrap ollama without model", "spec.bootstrap", awsBase+"bootstrap: {template: ollama}\n"),
	both("bootstrap none without userData", "spec.bootstrap", awsBase+"bootstrap: {template: none}\n"),
	both("bootstrap model with a space", "spec.bootstrap.model", awsBase+"bootstrap: {template: ollama, model: \"qwen 2\"}\n"),
	both("bootstrap agentURL over http", "spec.bootstrap.agentURL", awsBase+"bootstrap: {template: ollama, model: qwen2, agentURL: \"http://example.com/tidegpu\"}\n"),
	both("bootstrap agentSHA256 not hex", "spec.bootstrap.agentSHA256", awsBase+"bootstrap: {template: ollama, model: qwen2, agentSHA256: xyz}\n"),
	both("metrics family unknown", "spec.serving.metrics.family", base+"serving: {metrics: {family: triton}}\n"),
	both("metrics names with family none", "spec.serving.metrics.names", base+"serving: {metrics: {family: none, names: {queue: q}}}\n"),
	both("metrics names without queue under auto", "spec.serving.metrics.names.queue", base+"serving: {metrics: {names: {running: r}}}\n"),
	both("metrics name not a metric name", "spec.serving.metrics.names.running", base+"serving: {metrics: {family: vllm, names: {running: \"running requests\"}}}\n"),
	both("metrics kvCacheUnit unknown", "spec.serving.metrics.names.kvCacheUnit", base+"serving: {metrics: {family: vllm, names: {kvCacheUnit: Ratio}}}\n"),
	both("promql with family none", "spec.serving.metrics.promql", base+"serving: {metrics: {family: none, promql: {queue: q}}}\n"),
	both("promql blank", "spec.serving.metrics.promql.queue", base+"serving: {metrics: {promql: {queue: \"  \"}}}\n"),
	upOnly("promql a broken template", "spec.serving.metrics.promql.running", base+"serving: {metrics: {promql: {running: \"sum by ({{.Label) (x)\"}}}\n", "CEL cannot parse a Go template"),
	upOnly("promql an unknown template field", "spec.serving.metrics.promql.queue", base+"serving: {metrics: {promql: {queue: \"sum by ({{.Pod}}) (x)\"}}}\n", "CEL cannot render a Go template"),
	both("drainSeconds above 3600", "spec.drainSeconds", base+"drainSeconds: 4000\n"),
	both("env without =", "spec.local.env[0]", base+"local: {env: [novalue]}\n"),
	both("blank program", "spec.local.command", base+"local: {command: [\" \", serve]}\n"),
	both("start timeout 0", "spec.local.startTimeoutSeconds", base+"local: {startTimeoutSeconds: 0}\n"),
	// Placement.
	both("unknown strategy", "spec.placement.strategy", base+"placement: {strategy: Cheapest}\n"),
	both("availabilityTarget 100.5", "spec.placement.availabilityTarget", base+"placement: {availabilityTarget: \"100.5\"}\n"),
	both("availabilityTarget high", "spec.placement.availabilityTarget", base+"placement: {availabilityTarget: high}\n"),
	both("availabilityTarget 0", "spec.placement.availabilityTarget", base+"placement: {availabilityTarget: \"0\"}\n"),
	both("availabilityTarget 0.00", "spec.placement.availabilityTarget", base+"placement: {availabilityTarget: \"0.00\"}\n"),
	both("availabilityTarget as a fraction above 100", "spec.placement.availabilityTarget", base+"placement: {availabilityTarget: \"999\"}\n"),
	both("negative onDemandBase", "spec.placement.onDemandBase", base+"placement: {onDemandBase: -1}\n"),
	both("standby 101", "spec.placement.standby", base+"placement: {standby: 101}\n"),
	both("standby -1", "spec.placement.standby", base+"placement: {standby: -1}\n"),
	both("duplicate instanceTypes", "spec.placement.instanceTypes[1]", base+"placement: {instanceTypes: [g5.xlarge, g5.xlarge]}\n"),
	both("empty instance type", "spec.placement.instanceTypes[0]", base+"placement: {instanceTypes: [\"\"]}\n"),
	both("blank instance type", "spec.placement.instanceTypes[0]", base+"placement: {instanceTypes: [\"g5 xlarge\"]}\n"),
	both("instance type too long", "spec.placement.instanceTypes[0]", base+"placement: {instanceTypes: ["+strings.Repeat("x", 65)+"]}\n"),
	both("eleven instance types", "spec.placement.instanceTypes", base+"placement: {instanceTypes: [a, b, c, d, e, f, g, h, i, j, k]}\n"),
	both("empty zone", "spec.placement.availabilityZones[0]", base+"placement: {availabilityZones: [\"\"]}\n"),
	both("duplicate zones", "spec.placement.availabilityZones[1]", base+"placement: {availabilityZones: [us-east-1a, us-east-1a]}\n"),
	{name: "removed knob", field: "maxPerZone", spec: base + "placement: {maxPerZone: 2}\n", apiServer: true, unknown: true},
	{name: "removed knob eagerFallback", field: "eagerFallback", spec: base + "placement: {eagerFallback: true}\n", apiServer: true, unknown: true},
	// Pricing and budget.
	both("price a word", "spec.pricing.onDemandPerHour", base+"pricing: {onDemandPerHour: cheap}\n"),
	both("price negative", "spec.pricing.spotPerHour", base+"pricing: {spotPerHour: \"-1\"}\n"),
	both("price with an exponent", "spec.pricing.onDemandPerHour", base+"pricing: {onDemandPerHour: \"1e3\"}\n"),
	both("price with ten decimals", "spec.pricing.standbyPerHour", base+"pricing: {standbyPerHour: \"0.0111000001\"}\n"),
	both("price too large", "spec.pricing.onDemandPerHour", base+"pricing: {onDemandPerHour: \"99999999999\"}\n"),
	both("pricing currency lower case", "spec.pricing.currency", base+"pricing: {currency: usd}\n"),
	both("budget amount a word", "spec.budget.monthly", base+"budget: {monthly: lots}\n"),
	both("budget without an amount", "spec.budget.monthly", base+"budget: {action: Alert}\n"),
	both("bad budget action", "spec.budget.action", base+"budget: {monthly: \"2500\", action: Stop}\n"),
	both("budget currency too long", "spec.budget.currency", base+"budget: {monthly: \"2500\", currency: EURO}\n"),
	// Autoscaling.
	both("autoscaling on a pool of maximum 0", "spec.autoscaling.maxReplicas", "provider: local\nminimum: 0\nmaximum: 0\nautoscaling: {metrics: [{type: QPS, target: 10}]}\n"),
	both("autoscaling minReplicas above maximum", "spec.autoscaling.minReplicas", base+"autoscaling: {minReplicas: 6, metrics: [{type: QPS, target: 10}]}\n"),
	both("autoscaling maxReplicas below minimum", "spec.autoscaling.minReplicas", "provider: local\nminimum: 3\nmaximum: 4\nautoscaling: {maxReplicas: 2, metrics: [{type: QPS, target: 10}]}\n"),
	both("eleven metrics", "spec.autoscaling.metrics", base+"autoscaling: {metrics: ["+strings.Repeat("{type: QPS, target: 1}, ", 10)+"{type: QPS, target: 1}]}\n"),
	both("PromQL query too long", "spec.autoscaling.metrics[0].query", base+"autoscaling: {metrics: [{type: PromQL, name: q, target: 1, query: "+strings.Repeat("x", 4097)+"}]}\n"),
	both("33 schedules", "spec.autoscaling.schedules", base+"autoscaling: {schedules: ["+strings.Repeat("{start: \"0 8 * * *\", end: \"0 18 * * *\", minReplicas: 1}, ", 32)+"{start: \"0 8 * * *\", end: \"0 18 * * *\", minReplicas: 1}]}\n"),
	both("zone name too long", "spec.placement.availabilityZones[0]", base+"placement: {availabilityZones: ["+strings.Repeat("z", 65)+"]}\n"),
	both("65 subnets", "spec.placement.subnetIds", base+"placement: {subnetIds: {"+subnets(65)+"}}\n"),
	both("unknown metric type", "spec.autoscaling.metrics[0].type", base+"autoscaling: {metrics: [{type: RPS, target: 10}]}\n"),
	both("metric target 0", "spec.autoscaling.metrics[0].target", base+"autoscaling: {metrics: [{type: QPS, target: 0}]}\n"),
	both("metric target negative", "spec.autoscaling.metrics[0].target", base+"autoscaling: {metrics: [{type: QPS, target: \"-5\"}]}\n"),
	both("GPU target above 100", "spec.autoscaling.metrics[0].target", base+"autoscaling: {metrics: [{type: GPUUtilization, target: 150}]}\n"),
	both("latency percentile 120", "spec.autoscaling.metrics[0].percentile", base+"autoscaling: {metrics: [{type: Latency, target: 500, percentile: 120}]}\n"),
	both("PromQL without a query", "spec.autoscaling.metrics[0].query", base+"autoscaling: {metrics: [{type: PromQL, name: q, target: 1}]}\n"),
	both("PromQL without a name", "spec.autoscaling.metrics[0].name", base+"autoscaling: {metrics: [{type: PromQL, query: up, target: 1}]}\n"),
	both("targetType on QPS", "spec.autoscaling.metrics[0].targetType", base+"autoscaling: {metrics: [{type: QPS, target: 1, targetType: Value}]}\n"),
	both("unknown targetType", "spec.autoscaling.metrics[0].targetType", base+"autoscaling: {metrics: [{type: PromQL, name: q, query: up, target: 1, targetType: Total}]}\n"),
	both("metricMaxAge 0", "spec.autoscaling.metricMaxAge", base+"autoscaling: {metricMaxAge: 0s, metrics: [{type: QPS, target: 1}]}\n"),
	both("stabilization above 3600", "spec.autoscaling.behavior.scaleDown.stabilizationWindowSeconds", base+"autoscaling: {behavior: {scaleDown: {stabilizationWindowSeconds: 4000}}}\n"),
	both("unknown selectPolicy", "spec.autoscaling.behavior.scaleUp.selectPolicy", base+"autoscaling: {behavior: {scaleUp: {selectPolicy: Sometimes}}}\n"),
	both("tolerance 1.5", "spec.autoscaling.behavior.scaleUp.tolerance", base+"autoscaling: {behavior: {scaleUp: {tolerance: \"1.5\"}}}\n"),
	both("policy period 0", "spec.autoscaling.behavior.scaleDown.policies[0].periodSeconds", base+"autoscaling: {behavior: {scaleDown: {policies: [{type: Pods, value: 1, periodSeconds: 0}]}}}\n"),
	both("policy value 0", "spec.autoscaling.behavior.scaleDown.policies[0].value", base+"autoscaling: {behavior: {scaleDown: {policies: [{type: Pods, value: 0, periodSeconds: 15}]}}}\n"),
	both("panic without an additive metric", "spec.autoscaling.panic", base+"autoscaling: {panic: {}, metrics: [{type: Latency, target: 500}]}\n"),
	both("panic threshold 100", "spec.autoscaling.panic.thresholdPercent", base+"autoscaling: {panic: {thresholdPercent: 100}, metrics: [{type: QPS, target: 1}]}\n"),
	both("panic stable window 2s", "spec.autoscaling.panic.stableWindow", base+"autoscaling: {panic: {stableWindow: 2s}, metrics: [{type: QPS, target: 1}]}\n"),
	both("panic window above the stable window", "spec.autoscaling.panic.panicWindow", base+"autoscaling: {panic: {panicWindow: 2m}, metrics: [{type: QPS, target: 1}]}\n"),
	both("schedule minReplicas above maximum", "spec.autoscaling.schedules", base+"autoscaling: {schedules: [{start: \"0 8 * * *\", end: \"0 18 * * *\", minReplicas: 10}]}\n"),
	both("schedule minReplicas negative", "spec.autoscaling.schedules[0].minReplicas", base+"autoscaling: {schedules: [{start: \"0 8 * * *\", end: \"0 18 * * *\", minReplicas: -1}]}\n"),
	both("scaleToZero idle window of 10s", "spec.autoscaling.scaleToZero.idleWindow", "provider: local\nminimum: 0\nmaximum: 4\nautoscaling: {metrics: [{type: Concurrency, target: 4}], scaleToZero: {idleWindow: 10s}}\n"),
	both("scaleToZero negative activation threshold", "spec.autoscaling.scaleToZero.activationThreshold", "provider: local\nminimum: 0\nmaximum: 4\nautoscaling: {metrics: [{type: Concurrency, target: 4}], scaleToZero: {activationThreshold: \"-1\"}}\n"),
	both("scaleToZero with minimum 1", "spec.autoscaling.scaleToZero", base+"autoscaling: {metrics: [{type: Concurrency, target: 4}], scaleToZero: {}}\n"),
	both("scaleToZero without an additive metric", "spec.autoscaling.scaleToZero", "provider: local\nminimum: 0\nmaximum: 4\nautoscaling: {metrics: [{type: Latency, target: 200}], scaleToZero: {}}\n"),
	upOnly("schedule with a bad cron", "spec.autoscaling.schedules[0].start", base+"autoscaling: {schedules: [{start: \"0 25 * * *\", end: \"0 18 * * *\", minReplicas: 2}]}\n",
		"the cron grammar (robfig/cron) has no CEL counterpart"),
	upOnly("schedule that never fires", "spec.autoscaling.schedules[0].start", base+"autoscaling: {schedules: [{start: \"0 0 30 2 *\", end: \"0 18 * * *\", minReplicas: 2}]}\n",
		"whether a cron expression fires needs the cron grammar"),
	upOnly("schedule ending at its start", "spec.autoscaling.schedules[0].end", base+"autoscaling: {schedules: [{start: \"0 8 * * *\", end: \"0  8 * * *\", minReplicas: 2}]}\n",
		"compares the cron expressions normalised by the cron grammar"),
	upOnly("schedule in an unknown time zone", "spec.autoscaling.schedules[0].timeZone", base+"autoscaling: {schedules: [{start: \"0 8 * * *\", end: \"0 18 * * *\", minReplicas: 2, timeZone: Mars/Olympus}]}\n",
		"the IANA zone database is not available to CEL"),
	upOnly("duplicate metric names", "spec.autoscaling.metrics[1].name", base+"autoscaling: {metrics: [{type: QPS, target: 1}, {type: QPS, target: 2}]}\n",
		"unset names default from the type and percentile (qps, latency-p95)"),
	upOnly("predictive on an unknown metric", "spec.autoscaling.predictive.metric", base+"autoscaling: {metrics: [{type: QPS, target: 1}], predictive: {metric: rps, leadTime: 5m}}\n",
		"the metric's name may be a default derived from its type"),
	upOnly("burst on a non-additive metric", "spec.autoscaling.burst.metric", base+"autoscaling: {metrics: [{type: Latency, target: 500}], burst: {metric: latency-p95}}\n",
		"the metric's name may be a default derived from its type and percentile"),
	both("predictive lead time 25h", "spec.autoscaling.predictive.leadTime", base+"autoscaling: {metrics: [{type: QPS, target: 1}], predictive: {metric: qps, leadTime: 25h}}\n"),
	both("predictive slot 7m", "spec.autoscaling.predictive.slot", base+"autoscaling: {metrics: [{type: QPS, target: 1}], predictive: {metric: qps, leadTime: 5m, slot: 7m}}\n"),
	both("predictive history 13", "spec.autoscaling.predictive.history", base+"autoscaling: {metrics: [{type: QPS, target: 1}], predictive: {metric: qps, leadTime: 5m, history: 13}}\n"),
	both("predictive minSeasons above history", "spec.autoscaling.predictive.minSeasons", base+"autoscaling: {metrics: [{type: QPS, target: 1}], predictive: {metric: qps, leadTime: 5m, minSeasons: 5}}\n"),
	both("predictive EWMA weight 0", "spec.autoscaling.predictive.ewmaWeightPercent", base+"autoscaling: {metrics: [{type: QPS, target: 1}], predictive: {metric: qps, leadTime: 5m, ewmaWeightPercent: 0}}\n"),
	both("predictive unknown season", "spec.autoscaling.predictive.season", base+"autoscaling: {metrics: [{type: QPS, target: 1}], predictive: {metric: qps, leadTime: 5m, season: Monthly}}\n"),
	both("burst quantile 1.5", "spec.autoscaling.burst.quantile", base+"autoscaling: {metrics: [{type: QPS, target: 1}], burst: {metric: qps, quantile: \"1.5\"}}\n"),
	both("burst window 5m", "spec.autoscaling.burst.window", base+"autoscaling: {metrics: [{type: QPS, target: 1}], burst: {metric: qps, window: 5m}}\n"),
	both("burst bucket 1.5s", "spec.autoscaling.burst.bucket", base+"autoscaling: {metrics: [{type: QPS, target: 1}], burst: {metric: qps, bucket: 1500ms}}\n"),
	both("burst bucket above half the window", "spec.autoscaling.burst.bucket", base+"autoscaling: {metrics: [{type: QPS, target: 1}], burst: {metric: qps, window: 40m, bucket: 30m}}\n"),
	both("burst of too many buckets", "spec.autoscaling.burst.bucket", base+"autoscaling: {metrics: [{type: QPS, target: 1}], burst: {metric: qps, window: 168h, bucket: 1s}}\n"),
}

// valid documents both sides must accept.
var validCases = []struct{ name, spec string }{
	{"minimal", base},
	{"scale to zero", "provider: local\nminimum: 0\nmaximum: 4\nautoscaling: {metrics: [{type: Concurrency, target: 4}], scaleToZero: {idleWindow: 10m, activationThreshold: \"0.5\"}, schedules: [{start: \"0 9 * * 1-5\", end: \"0 18 * * 1-5\", minReplicas: 1}]}\n"},
	{"strategy unset", base + "placement: {}\n"},
	{"Adaptive with every number", base + `placement:
    strategy: Adaptive
    availabilityTarget: "99.5"
    onDemandBase: 1
    standby: 2
    availabilityZones: [us-east-1a, us-east-1b]
    instanceTypes: [g5.xlarge, g6.xlarge]
    subnetIds: {us-east-1a: subnet-a, us-east-1b: subnet-b}
`},
	{"LowestPrice", base + "placement: {strategy: LowestPrice, onDemandBase: 0}\n"},
	{"ZoneResilient", base + "placement: {strategy: ZoneResilient, standby: 0}\n"},
	{"OnDemand", base + "placement: {strategy: OnDemand}\n"},
	{"availabilityTarget 100 and 0.5", base + "placement: {availabilityTarget: \"100\"}\n"},
	{"availabilityTarget 0.5", base + "placement: {availabilityTarget: \"0.5\"}\n"},
	{"sim", "provider: sim\nminimum: 1\nmaximum: 2\nsim: {traceDir: traces/aws1, compression: 300, noticeSeconds: 0}\n"},
	{"aws with an endpoint and credentials", "provider: aws\nregion: us-east-1\nminimum: 0\nmaximum: 2\nendpoint: https://ec2.us-east-1.amazonaws.com\ncredentialsSecretRef: {name: aws}\n"},
	{"kong by IP", base + "kongGatewayIP: 192.0.2.10\n"},
	{"kong by host and port", base + "kongGatewayIP: kong.internal:8001\n"},
	{"kong by IPv6", base + "kongGatewayIP: \"fe80::1\"\n"},
	{"kong spec", base + "kong: {adminURL: \"https://kong-admin:8444\", tokenSecretRef: {name: kong, key: token}, tlsSecretRef: {name: kong-tls}}\n"},
	{"bootstrap ollama", awsBase + "bootstrap: {template: ollama, model: \"qwen2:0.5b\"}\n"},
	{"bootstrap vllm with args", tencentBase + "bootstrap: {template: vllm, model: Qwen/Qwen2.5-0.5B-Instruct, args: [--max-model-len, \"4096\"], agentURL: \"https://example.com/tidegpu\", agentSHA256: " + strings.Repeat("a", 64) + "}\n"},
	{"bootstrap none", awsBase + "bootstrap: {template: none, userData: \"#cloud-config\\n\"}\n"},
	{"serving, draining, local", base + "drainSeconds: 0\nserving: {port: 8080, readinessPath: /, models: [qwen2]}\nlocal: {command: [ollama, serve], env: [\"A=\", \"B=c=d\"], startTimeoutSeconds: 5}\n"},
	{"serving metrics: a family", base + "serving: {metrics: {family: sglang}}\n"},
	{"serving metrics: names of its own", base + "serving: {metrics: {names: {queue: my_queue, running: my_running, kvCache: my_kv_percent, kvCacheUnit: Percent, ttft: my_ttft_seconds}}}\n"},
	{"serving metrics: a family with one name renamed", base + "serving: {metrics: {family: vllm, names: {kvCache: \"vllm:gpu_cache_usage_perc\"}}}\n"},
	{"serving metrics: none", base + "serving: {metrics: {family: none}}\n"},
	{"serving metrics: queries of its own", base + "serving: {metrics: {family: vllm, promql: {queue: \"sum by ({{.Label}}) (my_waiting{{.Selector}})\", ttftP99: \"histogram_quantile(0.99, sum by ({{.Label}}, le) (rate(my_ttft_bucket[{{.Window}}])))\"}}}\n"},
	{"pricing and budget", base + "pricing: {onDemandPerHour: \"3.06\", spotPerHour: \"0.918\", standbyPerHour: \"0.0111\", currency: EUR}\nbudget: {monthly: \"2500\", currency: EUR, action: CapAtMinimum}\n"},
	{"every autoscaler", "provider: local\nminimum: 1\nmaximum: 8\n" + `autoscaling:
    minReplicas: 2
    maxReplicas: 6
    metricMaxAge: 90s
    metrics:
    - {type: QPS, target: 10}
    - {type: Latency, target: 500, percentile: 99}
    - {type: GPUUtilization, target: 80}
    - {type: PromQL, name: queue, query: "sum(queue)", target: "2.5", targetType: AverageValue}
    behavior:
      scaleUp: {stabilizationWindowSeconds: 0, selectPolicy: Max, tolerance: "0.05", policies: [{type: Percent, value: 100, periodSeconds: 15}]}
      scaleDown: {stabilizationWindowSeconds: 300, selectPolicy: Disabled}
    panic: {stableWindow: 60s, panicWindow: 6s, thresholdPercent: 200}
    schedules:
    - {name: office, start: "0 8 * * 1-5", end: "0 18 * * 1-5", minReplicas: 4, timeZone: Europe/Berlin}
    predictive: {metric: qps, leadTime: 5m, season: Daily, slot: 15m, aggregation: EWMA, history: 6, minSeasons: 2, ewmaWeightPercent: 40, headroomPercent: 10}
    burst: {metric: queue, target: 5, quantile: "0.99", window: 8h, bucket: 1m}
`},
}

func subnets(n int) string {
	var xs []string
	for i := range n {
		xs = append(xs, fmt.Sprintf("z%d: subnet-%d", i, i))
	}
	return strings.Join(xs, ", ")
}

func doc(name, spec string) string {
	indented := "  " + strings.ReplaceAll(strings.TrimRight(spec, "\n"), "\n", "\n  ")
	return fmt.Sprintf("apiVersion: tidegpu.eja.dev/v1\nkind: TidePool\nmetadata:\n  name: %s\nspec:\n%s\n", name, indented)
}

// create sends the document to the API server and returns its answer.
func create(t *testing.T, name, spec string) error {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc(name, spec)), &u.Object); err != nil {
		t.Fatalf("test document does not parse: %v", err)
	}
	u.SetNamespace("default")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Strict, as kubectl sends it: an unknown field is an error, not
	// silently pruned.
	err := k8s.Create(ctx, u, client.FieldValidation("Strict"))
	if err == nil {
		_ = k8s.Delete(ctx, u)
	}
	return err
}

func caseName(i int) string { return fmt.Sprintf("case-%d", i) }

func TestInvalidRefusedByBoth(t *testing.T) {
	for i, tc := range invalidCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Run("up", func(t *testing.T) {
				_, err := config.Parse(strings.NewReader(doc(caseName(i), tc.spec)), "test.yaml")
				if err == nil {
					t.Fatalf("tidegpu up accepted:\n%s", doc(caseName(i), tc.spec))
				}
				if !strings.Contains(err.Error(), tc.field) {
					t.Errorf("tidegpu up's error does not name %s:\n%v", tc.field, err)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Errorf("tidegpu up's error echoes the secret: %v", err)
				}
			})
			t.Run("apiserver", func(t *testing.T) {
				if k8s == nil {
					t.Skip("KUBEBUILDER_ASSETS is unset: no API server")
				}
				err := create(t, caseName(i), tc.spec)
				if !tc.apiServer {
					if err != nil {
						t.Errorf("marked apiServer: false (%s), but the API server refuses it: %v: mirror the rule in CEL and mark the case both", tc.why, err)
					}
					return
				}
				if err == nil {
					t.Fatalf("the API server accepted:\n%s", doc(caseName(i), tc.spec))
				}
				if !apierrors.IsInvalid(err) && !(tc.unknown && apierrors.IsBadRequest(err)) {
					t.Fatalf("the API server refused it, but not as invalid: %v", err)
				}
				msg := err.Error()
				if !strings.Contains(msg, tc.field) {
					t.Errorf("the API server's error does not name %s:\n%v", tc.field, err)
				}
				for _, bad := range []string{"hunter2", "no such overload", "evaluation error", "Internal error"} {
					if strings.Contains(msg, bad) {
						t.Errorf("the API server's error contains %q: %v", bad, err)
					}
				}
			})
		})
	}
}

func TestValidAcceptedByBoth(t *testing.T) {
	for i, tc := range validCases {
		name := fmt.Sprintf("valid-%d", i)
		t.Run(tc.name, func(t *testing.T) {
			t.Run("up", func(t *testing.T) {
				if _, err := config.Parse(strings.NewReader(doc(name, tc.spec)), "test.yaml"); err != nil {
					t.Errorf("tidegpu up refused a valid document: %v\n%s", err, doc(name, tc.spec))
				}
			})
			t.Run("apiserver", func(t *testing.T) {
				if k8s == nil {
					t.Skip("KUBEBUILDER_ASSETS is unset: no API server")
				}
				if err := create(t, name, tc.spec); err != nil {
					t.Errorf("the API server refused a valid document: %v\n%s", err, doc(name, tc.spec))
				}
			})
		})
	}
}
