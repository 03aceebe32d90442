package gateway

import (
	"container/list"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
)

func TestPrefixChoose(t *testing.T) {
	// Load and cost equal unless a case says otherwise.
	c := func(matched int, load float64, rank uint64) prefixCand {
		return prefixCand{matched: matched, load: load, cost: load, rank: rank}
	}
	paced := func(pc prefixCand, cost float64) prefixCand { pc.cost = cost; return pc }
	tests := []struct {
		name  string
		cs    []prefixCand
		bound float64
		want  int
	}{
		{"affinity: the longest prefix wins over a cheaper backend", []prefixCand{c(0, 1, 9), c(5, 1.5, 1), c(2, 1, 5)}, 2, 1},
		{"longer history beats a shared system prompt", []prefixCand{c(3, 1, 9), c(7, 1.2, 1)}, 2, 1},
		{"equal matches: the cheaper", []prefixCand{c(4, 1.4, 9), c(4, 1.1, 1)}, 2, 1},
		{"equal matches and costs: the higher rank", []prefixCand{c(4, 1, 1), c(4, 1, 9)}, 2, 1},
		{"bounded load: the holder above 2x the cheapest spills", []prefixCand{c(8, 2.5, 9), c(0, 1, 1), c(0, 1.2, 5)}, 2, 2},
		{"spill goes to the next holder before a stranger", []prefixCand{c(8, 3, 9), c(2, 1.9, 1), c(0, 1, 5)}, 2, 1},
		{"at the bound it stays", []prefixCand{c(8, 2, 9), c(0, 1, 1)}, 2, 0},
		{"no holder: the rendezvous home", []prefixCand{c(0, 1, 3), c(0, 1.5, 7), c(0, 1, 5)}, 2, 1},
		{"no holder: a home above the bound is skipped", []prefixCand{c(0, 1, 3), c(0, 2.5, 7), c(0, 1, 5)}, 2, 2},
		{"bound 1: only the cheapest", []prefixCand{c(8, 1.01, 9), c(0, 1, 1)}, 1, 1},
		{"zero costs (no signals yet) tie", []prefixCand{c(0, 0, 3), c(2, 0, 1)}, 2, 1},
		{"the bound is on load, not latency: a slow-looking holder keeps it", []prefixCand{paced(c(8, 1.2, 9), 10), c(0, 1, 1)}, 2, 0},
		{"equal matches: the lower cost, latency included", []prefixCand{paced(c(4, 1, 9), 3), paced(c(4, 1.3, 1), 1)}, 2, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := prefixChoose(tt.cs, tt.bound); got != tt.want {
				t.Fatalf("picked %d, want %d", got, tt.want)
			}
		})
	}
}

func TestLeastCost(t *testing.T) {
	tests := []struct {
		name     string
		costs    []float64
		inflight []int64
		draws    []int // successive results of draw
		want     int
	}{
		{"single", []float64{3}, []int64{5}, nil, 0},
		{"lowest", []float64{3, 1, 2}, []int64{0, 0, 0}, nil, 1},
		{"near the lowest: fewer in flight", []float64{1, 1.4, 3}, []int64{4, 1, 0}, nil, 1},
		{"beyond the tolerance: out however idle", []float64{1, 1.6}, []int64{6, 0}, nil, 0},
		// Three-way tie: draw(2) then draw(3); 0 takes the newcomer.
		{"tie keeps the first", []float64{1, 1, 1}, []int64{0, 0, 0}, []int{1, 1}, 0},
		{"tie takes the last", []float64{1, 1, 1}, []int64{0, 0, 0}, []int{1, 0}, 2},
		{"fewer in flight resets the tie", []float64{1, 1, 1}, []int64{1, 1, 0}, []int{1}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			draws := tt.draws
			got := leastCost(tt.costs, tt.inflight, func(n int) int {
				if len(draws) == 0 {
					t.Fatalf("unexpected draw(%d)", n)
				}
				v := draws[0]
				draws = draws[1:]
				return v
			})
			if got != tt.want || len(draws) != 0 {
				t.Fatalf("picked %d (%d draws left), want %d", got, len(draws), tt.want)
			}
		})
	}
}

// TestLeastCostSlowBackend: a backend three times slower and idle loses to
// a fast one with requests inside its batch, and wins once the fast ones
// queue (the low-load case of issue 13, item 6).
func TestLeastCostSlowBackend(t *testing.T) {
	fast := func(in int64) Load { return Load{InFlight: in, Weight: 100, TTFT: 40e6, Concurrency: 8} }
	slow := Load{Weight: 100, TTFT: 120e6, Concurrency: 8}
	for _, tt := range []struct {
		in       int64
		wantSlow bool
	}{{0, false}, {4, false}, {7, false}, {8, true}, {9, true}, {12, true}} {
		loads := []Load{fast(tt.in), fast(tt.in), fast(tt.in), slow}
		basis := commonBasis(loads)
		costs := make([]float64, len(loads))
		in := make([]int64, len(loads))
		for i, l := range loads {
			costs[i], in[i] = Score(l, basis), l.InFlight
		}
		got := leastCost(costs, in, func(int) int { return 1 }) == 3
		if got != tt.wantSlow {
			t.Errorf("fast ones with %d in flight: slow picked %v, want %v (costs %v)", tt.in, got, tt.wantSlow, costs)
		}
	}
}

func TestCommonBasis(t *testing.T) {
	full := Load{TTFT: 1, Latency: 1, Fresh: true, Concurrency: 8}
	if b := commonBasis([]Load{full, full}); b != (Basis{TTFT: true, Latency: true, Metrics: true, Concurrency: true}) {
		t.Errorf("all signals: %+v", b)
	}
	partial := full
	partial.TTFT, partial.Fresh = 0, false
	if b := commonBasis([]Load{full, partial, full}); b != (Basis{Latency: true, Concurrency: true}) {
		t.Errorf("one without TTFT and metrics: %+v", b)
	}
}

func TestBlockIndex(t *testing.T) {
	h := func(from, n int) []uint64 {
		out := make([]uint64, n)
		for i := range out {
			out[i] = uint64(from + i)
		}
		return out
	}
	var x blockIndex
	if got := x.matched(h(0, 4)); got != 0 {
		t.Fatalf("empty index matched %d", got)
	}
	x.record(h(0, 4), 6)
	for _, tt := range []struct {
		q    []uint64
		want int
	}{{h(0, 4), 4}, {h(0, 2), 2}, {h(0, 8), 4}, {h(1, 3), 3}, {h(10, 3), 0}, {nil, 0}} {
		if got := x.matched(tt.q); got != tt.want {
			t.Errorf("matched(%v) = %d, want %d", tt.q, got, tt.want)
		}
	}
	// Four more blocks overflow 6: the oldest prompt loses its deepest
	// blocks first and keeps its leading ones.
	x.record(h(100, 4), 6)
	if got := x.len(); got != 6 {
		t.Fatalf("len %d, want 6", got)
	}
	if got := x.matched(h(0, 4)); got != 2 {
		t.Errorf("after eviction the first prompt matches %d, want its 2 leading blocks", got)
	}
	// A prompt longer than the capacity keeps its head.
	var y blockIndex
	y.record(h(0, 10), 3)
	if got := y.matched(h(0, 10)); got != 3 {
		t.Errorf("long prompt matches %d, want 3", got)
	}
}

func TestPrefixHashes(t *testing.T) {
	a := []byte(strings.Repeat("a", 64) + strings.Repeat("b", 64) + "tail")
	b := []byte(strings.Repeat("a", 64) + strings.Repeat("c", 64))
	ha, hb := prefixHashes([]byte("m"), a, 64), prefixHashes([]byte("m"), b, 64)
	if len(ha) != 2 || len(hb) != 2 {
		t.Fatalf("%d and %d blocks, want 2 each (a partial block is not hashed)", len(ha), len(hb))
	}
	if ha[0] != hb[0] || ha[1] == hb[1] {
		t.Error("the same first block must hash the same, different second blocks differently")
	}
	if other := prefixHashes([]byte("lora-b"), a, 64); other[0] == ha[0] {
		t.Error("another model (a LoRA adapter) must be another key")
	}
	// Chained: the same second block after another first block differs.
	c := []byte(strings.Repeat("z", 64) + strings.Repeat("b", 64))
	if hc := prefixHashes([]byte("m"), c, 64); hc[1] == ha[1] {
		t.Error("block 2 must depend on block 1")
	}
	if got := prefixHashes([]byte("m"), []byte("short"), 64); got != nil {
		t.Errorf("no full block: %v", got)
	}
	if got := len(prefixHashes([]byte("m"), make([]byte, 64*(maxPrefixBlocks+5)), 64)); got != maxPrefixBlocks {
		t.Errorf("%d blocks, want the cap %d", got, maxPrefixBlocks)
	}
}

// listLRU is an exact LRU set of block hashes (a container/list and a
// map), with the same order of insertion (a prompt's first block most
// recent) and eviction (beyond capacity, from the least recent): one set of
// blockIndex is checked against it, and the whole index measured against
// it (TestBlockIndexCloseToLRU). It was blockIndex before blockIndex was
// set-associative.
type listLRU struct {
	lru   list.List
	index map[uint64]*list.Element
}

func (r *listLRU) record(hashes []uint64, capacity int) {
	if r.index == nil {
		r.index = map[uint64]*list.Element{}
	}
	for i := len(hashes) - 1; i >= 0; i-- {
		if e, ok := r.index[hashes[i]]; ok {
			r.lru.MoveToFront(e)
		} else {
			r.index[hashes[i]] = r.lru.PushFront(hashes[i])
		}
	}
	for r.lru.Len() > max(capacity, 1) {
		delete(r.index, r.lru.Remove(r.lru.Back()).(uint64))
	}
}

func (r *listLRU) matched(hashes []uint64) int {
	for i, h := range hashes {
		if _, ok := r.index[h]; !ok {
			return i
		}
	}
	return len(hashes)
}

// TestBlockIndexAgainstSets: random prompts (sharing prefixes, as chat
// turns do) recorded into the index and into an exact LRU per set (the
// reference: its set and its number of ways from the index's place and
// waysOf) hold the same blocks after every call, with the capacity now and
// then changed (which empties both) and the stamps' clock run out twice
// (restamp).
func TestBlockIndexAgainstSets(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	var x blockIndex
	var ref []listLRU
	seen := map[uint64]bool{}
	capacity := 40
	for step := range 4000 {
		if step%500 == 499 {
			capacity = []int{40, 7, 100, 1, 64, 33, 40, 9}[step/500%8]
		}
		n := rng.IntN(12)
		hashes := make([]uint64, n)
		root := uint64(rng.IntN(12)) * 1000
		for i := range hashes {
			hashes[i] = root + uint64(i) + uint64(rng.IntN(3)/2)*100 // some prompts branch
			seen[hashes[i]] = true
		}
		if capacity != x.capacity {
			ref = nil
		}
		x.record(hashes, capacity)
		if ref == nil {
			ref = make([]listLRU, len(x.sets))
		}
		if step == 700 || step == 3100 {
			x.clock = ^uint32(0) - 20 // runs out within the next prompts
		}
		for i := len(hashes) - 1; i >= 0; i-- {
			set, _ := x.place(hashes[i])
			ref[set].record(hashes[i:i+1], x.waysOf(set))
		}
		held := 0
		for i := range ref {
			held += ref[i].lru.Len()
		}
		if x.len() != held {
			t.Fatalf("step %d (capacity %d): the index holds %d blocks, the sets %d", step, capacity, x.len(), held)
		}
		for h := range seen {
			set, _ := x.place(h)
			want := ref[set].matched([]uint64{h})
			if got := x.matched([]uint64{h}); got != want {
				t.Fatalf("step %d (capacity %d, recorded %v): block %d held %d, its set's LRU %d", step, capacity, hashes, h, got, want)
			}
		}
	}
}

// TestBlockIndexMatchedEveryLength: an index holding the first k blocks of
// a prompt of n matches exactly k, for every k: none, the first block only
// (matched reads it apart), and the binary search's edges.
func TestBlockIndexMatchedEveryLength(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 64, 100} {
		hashes := make([]uint64, n)
		for i := range hashes {
			hashes[i] = uint64(n*1000 + i)
		}
		for k := 0; k <= n; k++ {
			var x blockIndex
			x.record([]uint64{1}, 4096) // not empty: the search runs
			x.record(hashes[:k], 4096)
			if got := x.matched(hashes); got != k {
				t.Errorf("n %d: holding %d leading blocks, matched %d", n, k, got)
			}
		}
	}
}

// BenchmarkBlockIndexMatched: a 64-block prompt matched against 8 full
// indexes, one of which holds it, as pickPrompt matches a prompt against
// a pool's candidates; the prompts (1,024, dealt over the indexes) change
// from call to call, so that most of the sets read are not in cache.
//
//	go test -run XXX -bench BlockIndexMatched ./internal/gateway/
func BenchmarkBlockIndexMatched(b *testing.B) {
	const cands, prompts = 8, 1024
	idx := make([]blockIndex, cands)
	next := uint64(0)
	block := func() uint64 { next++; return next * 0x9E3779B97F4A7C15 }
	fill := make([]uint64, 64)
	for i := range idx {
		for range DefaultPrefixIndexBlocks / len(fill) {
			for j := range fill {
				fill[j] = block()
			}
			idx[i].record(fill, DefaultPrefixIndexBlocks)
		}
	}
	ps := make([][]uint64, prompts)
	for k := range ps {
		ps[k] = make([]uint64, 64)
		for j := range ps[k] {
			ps[k][j] = block()
		}
		idx[k%cands].record(ps[k], DefaultPrefixIndexBlocks)
	}
	k := 0
	for b.Loop() {
		for i := range idx {
			idx[i].matched(ps[k])
		}
		k = (k + 1) % prompts
	}
}

// TestBlockIndexSize: the sets' ways add up to the capacity, at most
// blockWays each, for capacities from one way to many sets.
func TestBlockIndexSize(t *testing.T) {
	for _, c := range []int{1, 3, 7, 8, 9, 15, 16, 17, 33, 40, 64, 100, 1000, DefaultPrefixIndexBlocks, DefaultPrefixIndexBlocks + 5} {
		var x blockIndex
		x.size(c)
		total := 0
		for i := range x.sets {
			w := x.waysOf(i)
			if w < 1 || w > blockWays {
				t.Fatalf("capacity %d: set %d has %d ways", c, i, w)
			}
			total += w
		}
		if total != c {
			t.Errorf("capacity %d: %d ways in %d sets", c, total, len(x.sets))
		}
	}
}

// TestBlockIndexCloseToLRU: chat-like traffic (conversations that each
// repeat their history and add a turn, under a few shared system prompts,
// with one-off prompts between) recorded into the set-associative index
// and into an exact LRU of the same capacity (listLRU, a model of the
// backend's own cache), every prompt matched against both before it is
// recorded, as the policy does. The load keeps ten times the capacity in
// live histories, so that most matches are made near the end of a
// block's life, where the two differ. Asserted: the blocks found held add
// up to within 2 % of the exact LRU's, and at least 90 % of the prompts
// match the same number of blocks in both. Measured with 8 ways: 0.9 %
// fewer blocks, the same match on 93 % of the prompts. The leading run of
// held blocks (a scan to the first gap) would find 23 % fewer than the
// exact LRU: near the end of their life the blocks of a prompt go at
// random across sets, and matched's binary search reads them as the LRU's
// clean cut, which is the better estimate of what the backend holds.
func TestBlockIndexCloseToLRU(t *testing.T) {
	const capacity = 4096
	rng := rand.New(rand.NewPCG(4, 12))
	var x blockIndex
	var ref listLRU
	chats := make([][]uint64, 400) // each conversation's history
	next := uint64(1)
	block := func() uint64 { next++; return next * 7919 }
	system := make([][]uint64, 6)
	for i := range system {
		for range 8 + rng.IntN(24) {
			system[i] = append(system[i], block())
		}
	}
	var gotSum, wantSum, same, n, linSum int
	for step := range 30000 {
		var hashes []uint64
		if rng.IntN(5) == 0 { // a one-off prompt
			for range 16 + rng.IntN(64) {
				hashes = append(hashes, block())
			}
		} else {
			c := &chats[rng.IntN(len(chats))]
			if len(*c) == 0 || len(*c) > 200 {
				*c = slices.Clone(system[rng.IntN(len(system))])
			}
			for range 2 + rng.IntN(6) {
				*c = append(*c, block())
			}
			hashes = *c
		}
		got, want := x.matched(hashes), ref.matched(hashes)
		if step > 2000 { // past filling
			gotSum += got
			wantSum += want
			n++
			if got == want {
				same++
			}
			lin := 0
			for _, h := range hashes {
				if x.matched([]uint64{h}) == 0 {
					break
				}
				lin++
			}
			linSum += lin
		}
		x.record(hashes, capacity)
		ref.record(hashes, capacity)
	}
	t.Logf("blocks found held: set-associative %d, exact LRU %d (%+.2f %%); the same match on %d of %d prompts; leading runs %d (%+.1f %%)",
		gotSum, wantSum, 100*float64(gotSum-wantSum)/float64(wantSum), same, n, linSum, 100*float64(linSum-wantSum)/float64(wantSum))
	if d := float64(gotSum-wantSum) / float64(wantSum); d > 0.02 || d < -0.02 {
		t.Errorf("the index found %d blocks held, the exact LRU %d: over 2 %% apart", gotSum, wantSum)
	}
	if float64(same) < 0.9*float64(n) {
		t.Errorf("%d of %d prompts matched the same number of blocks in both, want at least 90 %%", same, n)
	}
}

// TestBlockIndexRecordAllocations: once made, the index records a new
// prompt's blocks in place of the evicted ones, allocating nothing.
func TestBlockIndexRecordAllocations(t *testing.T) {
	var x blockIndex
	next := uint64(0)
	prompt := make([]uint64, 64)
	fresh := func() {
		for i := range prompt {
			prompt[i] = next
			next++
		}
	}
	for range 8 { // fill 512 blocks
		fresh()
		x.record(prompt, 512)
	}
	if a := testing.AllocsPerRun(100, func() { fresh(); x.record(prompt, 512) }); a > 0 {
		t.Errorf("%.1f allocations per new 64-block prompt in a full index, want 0", a)
	}
}

// TestPrefixHashesChain: each block's hash is xxhash64 of the previous
// hash's eight little-endian bytes then the block's bytes, the first
// chained from the model's hash — the definition, computed here by a
// streaming Digest, for block sizes on the stack and beyond it.
func TestPrefixHashesChain(t *testing.T) {
	text := []byte(strings.Repeat("The sea is calm tonight, the tide is full. ", 40))
	for _, bs := range []int{1, 16, DefaultPrefixBlockBytes, 4 * DefaultPrefixBlockBytes, 4*DefaultPrefixBlockBytes + 1, 700} {
		got := prefixHashes([]byte("llama3"), text, bs)
		prev := xxhash.Sum64String("llama3")
		n := min(len(text)/bs, maxPrefixBlocks)
		if len(got) != n {
			t.Fatalf("block %d: %d hashes, want %d", bs, len(got), n)
		}
		for i := range n {
			d := xxhash.New()
			var seed [8]byte
			binary.LittleEndian.PutUint64(seed[:], prev)
			d.Write(seed[:])
			d.Write(text[i*bs : (i+1)*bs])
			prev = d.Sum64()
			if got[i] != prev {
				t.Fatalf("block size %d, block %d: %x, want %x", bs, i, got[i], prev)
			}
		}
	}
}

// TestPromptText: one body per API, shaped after the APIs' references
// (https://github.com/ollama/ollama/blob/main/docs/api.md,
// https://platform.openai.com/docs/api-reference/chat/create,
// /completions/create and /responses/create).
func TestPromptText(t *testing.T) {
	tests := []struct {
		name, path, body string
		model, text      string
		ok               bool
	}{
		{"ollama chat", "/api/chat", `{"model":"llama3","messages":[{"role":"system","content":"S"},{"role":"user","content":"U"}]}`,
			"llama3", "system\x00S\x00user\x00U\x00", true},
		{"ollama generate", "/api/generate", `{"model":"m","system":"S","prompt":"P"}`, "m", "system\x00S\x00prompt\x00P\x00", true},
		{"openai chat with parts", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`,
			"m", "user\x00ab\x00", true},
		{"openai completion string", "/v1/completions", `{"model":"m","prompt":"P"}`, "m", "prompt\x00P\x00", true},
		{"openai completion token ids", "/v1/completions", `{"model":"m","prompt":[1,2,3]}`, "m", "prompt\x00[1,2,3]\x00", true},
		{"responses string", "/v1/responses", `{"model":"m","instructions":"I","input":"U"}`, "m", "instructions\x00I\x00user\x00U\x00", true},
		{"responses items", "/v1/responses", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"U"}]},{"type":"function_call_output","output":"x"}]}`,
			"m", "instructions\x00\x00user\x00U\x00item\x00{\"type\":\"function_call_output\",\"output\":\"x\"}\x00", true},
		{"not a generation API", "/v1/embeddings", `{"model":"m","input":"x"}`, "", "", false},
		{"not JSON", "/api/chat", `{"model":`, "", "", false},
		{"content of the wrong type counts as JSON", "/api/chat", `{"model":"m","messages":[{"role":"user","content":7}]}`, "m", "user\x007\x00", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model, text, ok := promptText(tt.path, []byte(tt.body), nil)
			if model != tt.model || string(text) != tt.text || ok != tt.ok {
				t.Fatalf("got %q %q %v, want %q %q %v", model, text, ok, tt.model, tt.text, tt.ok)
			}
		})
	}
	// The next turn of a chat begins with the previous turn's text.
	turn1 := `{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"U1"}]}`
	turn2 := `{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"U1"},{"role":"assistant","content":"A1"},{"role":"user","content":"U2"}]}`
	_, t1, _ := promptText("/v1/chat/completions", []byte(turn1), nil)
	_, t2, _ := promptText("/v1/chat/completions", []byte(turn2), nil)
	if !strings.HasPrefix(string(t2), string(t1)) {
		t.Errorf("turn 2 %q does not begin with turn 1 %q", t2, t1)
	}
	// The text is capped.
	long := fmt.Sprintf(`{"model":"m","prompt":%q}`, strings.Repeat("x", 2*maxPromptBytes))
	if _, text, _ := promptText("/api/generate", []byte(long), nil); len(text) != maxPromptBytes {
		t.Errorf("text of %d bytes, want the cap %d", len(text), maxPromptBytes)
	}
}

func FuzzPromptText(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"text":"a"}]}]}`,
		`{"model":"m","prompt":["a","b"]}`,
		`{"model":"m","input":[{"type":"x"}]}`,
		`[]`, `null`, `{"messages":null}`,
	} {
		for _, p := range []string{"/api/chat", "/api/generate", "/v1/chat/completions", "/v1/completions", "/v1/responses"} {
			f.Add(p, []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, path string, body []byte) {
		model, text, ok := promptText(path, body, nil)
		if !ok && (model != "" || text != nil) {
			t.Fatal("a refused body returned a prompt")
		}
		if len(text) > maxPromptBytes {
			t.Fatalf("text of %d bytes beyond the cap", len(text))
		}
		hs := prefixHashes([]byte(model), text, DefaultPrefixBlockBytes)
		if len(hs) != len(text)/DefaultPrefixBlockBytes {
			t.Fatalf("%d hashes for %d bytes", len(hs), len(text))
		}
	})
}

func TestPrefixOptions(t *testing.T) {
	g, err := New(Options{PrefixIndexBlocks: 7, ProbeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.prefix == nil || g.prefix.IndexBlocks != 7 || g.prefix.Clock == nil {
		t.Fatalf("the default policy is not prefix-aware with the options applied: %+v", g.prefix)
	}
	own := &PrefixAware{IndexBlocks: 3}
	g2, err := New(Options{CustomPolicy: own, PrefixIndexBlocks: 7, ProbeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close()
	if own.IndexBlocks != 3 {
		t.Errorf("a custom policy's own IndexBlocks was overwritten: %d", own.IndexBlocks)
	}
}

func TestPrefixChooseTime(t *testing.T) {
	// A prompt of 200 blocks, 3 ms per uncached block, 60 ms per request
	// ahead: one request ahead is worth 20 blocks of prefill.
	const n, block, slot = 200, 0.003, 0.060
	c := func(matched int, ahead, cost float64, rank uint64) prefixCand {
		return prefixCand{matched: matched, load: cost, cost: cost, rank: rank, ahead: ahead}
	}
	tests := []struct {
		name string
		cs   []prefixCand
		want int
	}{
		{"affinity: the history's holder with a free slot", []prefixCand{c(150, 0, 1.9, 1), c(125, 0, 1, 9), c(0, 0, 1, 5)}, 0},
		{"a short wait beats re-prefilling the history", []prefixCand{c(190, 1, 2.1, 1), c(125, 0, 1, 9)}, 0},
		{"a long wait spills to the system prompt's other holder", []prefixCand{c(190, 4, 5, 1), c(125, 0, 1.5, 9), c(0, 0, 1, 5)}, 1},
		{"spill prefers a holder of the system prompt to an idle stranger", []prefixCand{c(190, 8, 9, 1), c(125, 1, 2, 9), c(0, 0, 1, 5)}, 1},
		{"a queue longer than the whole prefill goes to a stranger", []prefixCand{c(200, 11, 12, 1), c(0, 0, 1, 5)}, 1},
		{"a new conversation: among the system prompt's holders, the cheaper", []prefixCand{c(125, 0, 1.8, 9), c(125, 0, 1.2, 1), c(0, 0, 1, 5)}, 1},
		{"no holder: the rendezvous home", []prefixCand{c(0, 0, 1, 3), c(0, 0, 1.5, 7), c(0, 0, 1, 5)}, 1},
		{"no holder: a queueing home is passed over", []prefixCand{c(0, 0, 1, 3), c(0, 1, 2.1, 7), c(0, 0, 1, 5)}, 2},
		{"a hot prefix's holders all queue: a second home with a free slot, once the wait is worth it", []prefixCand{c(125, 7, 8, 9), c(0, 0, 1, 1)}, 1},
		{"fractional ahead from the queue metric counts", []prefixCand{c(150, 2.6, 3, 1), c(100, 0, 1, 9)}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := prefixChooseTime(tt.cs, n, block, slot); got != tt.want {
				t.Fatalf("picked %d, want %d", got, tt.want)
			}
		})
	}
}

func TestPrefixChooseBoundedTime(t *testing.T) {
	// As TestPrefixChooseTime (200 blocks, 3 ms a block, 60 ms a request
	// ahead), with the load bound 2: a candidate above twice the least load
	// is out whatever its expected time.
	const n, block, slot, bound = 200, 0.003, 0.060, 2.0
	c := func(matched int, ahead, load float64, rank uint64) prefixCand {
		return prefixCand{matched: matched, load: load, cost: load, rank: rank, ahead: ahead}
	}
	tests := []struct {
		name string
		cs   []prefixCand
		want int
	}{
		{"affinity: the history's holder with a free slot", []prefixCand{c(150, 0, 1.9, 1), c(125, 0, 1, 9), c(0, 0, 1, 5)}, 0},
		{"inside the bound, a wait longer than the history's prefill spills to the system prompt's holder", []prefixCand{c(150, 2, 2.9, 1), c(125, 0, 1.5, 9)}, 1},
		{"inside the bound, a short wait beats re-prefilling a long history", []prefixCand{c(190, 1, 2.1, 1), c(125, 0, 1.2, 9)}, 0},
		{"the bound caps the greedy wait: a holder above it is out though its queue is cheaper than a whole prefill", []prefixCand{c(200, 8, 9, 1), c(125, 0, 1.5, 9), c(0, 0, 1, 5)}, 1},
		{"a holder above the bound leaves a stranger only when no other holder is in", []prefixCand{c(200, 8, 9, 1), c(0, 0, 1, 5)}, 1},
		{"a new conversation: among the system prompt's holders, the cheaper", []prefixCand{c(125, 0, 1.8, 9), c(125, 0, 1.2, 1), c(0, 0, 1, 5)}, 1},
		{"no holder: the rendezvous home", []prefixCand{c(0, 0, 1, 3), c(0, 0, 1.5, 7), c(0, 0, 1, 5)}, 1},
		{"no holder: a queueing home is passed over", []prefixCand{c(0, 0, 1, 3), c(0, 1, 2.1, 7), c(0, 0, 1, 5)}, 2},
		{"the least loaded is always in", []prefixCand{c(0, 3, 4, 3)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := prefixChooseBoundedTime(tt.cs, bound, n, block, slot); got != tt.want {
				t.Fatalf("picked %d, want %d", got, tt.want)
			}
		})
	}
}

func TestParsePrefixSpill(t *testing.T) {
	tests := []struct {
		in      string
		want    PrefixSpill
		wantErr bool
	}{
		{"", SpillBound, false},
		{"bound", SpillBound, false},
		{"time", SpillTime, false},
		{"bounded-time", SpillBoundedTime, false},
		{"Bound", SpillBound, true},
		{"greedy", SpillBound, true},
	}
	for _, tt := range tests {
		got, err := ParsePrefixSpill(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParsePrefixSpill(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err == nil && tt.in != "" && got.String() != tt.in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tt.in)
		}
	}
}

func TestAhead(t *testing.T) {
	all := Basis{Metrics: true, Concurrency: true}
	tests := []struct {
		name  string
		l     Load
		basis Basis
		want  float64
	}{
		{"free slot", Load{InFlight: 3, Concurrency: 8}, all, 0},
		{"the last free slot", Load{InFlight: 7, Concurrency: 8}, all, 0},
		{"one ahead", Load{InFlight: 8, Concurrency: 8}, all, 1},
		{"the backend's queue counts when larger", Load{InFlight: 8, Concurrency: 8, Queue: 3, Fresh: true}, all, 3},
		{"the queue without fresh metrics does not", Load{InFlight: 2, Concurrency: 8, Queue: 3}, Basis{Concurrency: true}, 0},
		{"unknown batch", Load{InFlight: 9}, all, -1},
		{"batch not common to all", Load{InFlight: 9, Concurrency: 8}, Basis{Metrics: true}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ahead(tt.l, tt.basis); got != tt.want {
				t.Fatalf("ahead %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFitLine(t *testing.T) {
	sums := func(pts ...[2]float64) (w, sx, sy, sxx, sxy float64) {
		for _, p := range pts {
			w, sx, sy, sxx, sxy = w+1, sx+p[0], sy+p[1], sxx+p[0]*p[0], sxy+p[0]*p[1]
		}
		return
	}
	tests := []struct {
		name   string
		pts    [][2]float64
		a, b   float64
		wantOK bool
	}{
		{"a line", [][2]float64{{0, 1}, {10, 2}, {20, 3}}, 1, 0.1, true},
		{"no spread", [][2]float64{{5, 1}, {5, 2}, {6, 3}}, 0, 0, false},
		{"negative slope", [][2]float64{{0, 3}, {10, 2}, {20, 1}}, 0, 0, false},
		{"empty", nil, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b, ok := fitLine(sums(tt.pts...))
			if ok != tt.wantOK || ok && (math.Abs(a-tt.a) > 1e-9 || math.Abs(b-tt.b) > 1e-9) {
				t.Fatalf("fitLine = %v, %v, %v; want %v, %v, %v", a, b, ok, tt.a, tt.b, tt.wantOK)
			}
		})
	}
}

// TestPrefillModel: the model learns a backend's prefill time per block and
// wait per request ahead from TTFTs, and is not used before it has seen
// enough of both.
func TestPrefillModel(t *testing.T) {
	const base, block, slot = 0.020, 0.0032, 0.063
	ttft := func(uncached int, ahead float64) time.Duration {
		return time.Duration((base + block*float64(uncached) + slot*ahead) * float64(time.Second))
	}
	var m prefillModel
	if _, _, ok := m.times(); ok {
		t.Fatal("an empty model is usable")
	}
	m.observe(prefixPick{uncached: 5, ahead: 0}, ttft(5, 0)) // not ok: no prefix signal
	m.observe(prefixPick{uncached: 5, ahead: -1, ok: true}, ttft(5, 0))
	if m.n0 != 0 {
		t.Fatal("picks without a prefix signal or a known queue are learnt from")
	}
	for i := range prefillMinSamples {
		x := []int{3, 8, 125, 20}[i%4]
		m.observe(prefixPick{uncached: x, ok: true}, ttft(x, 0))
	}
	if _, _, ok := m.times(); ok {
		t.Fatal("usable before any queued sample")
	}
	for i := range slotMinSamples {
		a := float64(1 + i%3)
		m.observe(prefixPick{uncached: 6, ahead: a, ok: true}, ttft(6, a))
	}
	gotBlock, gotSlot, ok := m.times()
	if !ok || math.Abs(gotBlock-block) > 1e-4 || math.Abs(gotSlot-slot) > 1e-3 {
		t.Fatalf("times = %v, %v, %v; want %v, %v", gotBlock, gotSlot, ok, block, slot)
	}
	// The wait follows the moment: after many samples of a longer wait,
	// slotTime is near it.
	for range 4 * slotMemory {
		m.observe(prefixPick{uncached: 6, ahead: 2, ok: true}, ttft(6, 2)+2*30*time.Millisecond)
	}
	if _, gotSlot, _ = m.times(); math.Abs(gotSlot-(slot+0.030)) > 0.003 {
		t.Fatalf("after a longer wait, slotTime %v, want about %v", gotSlot, slot+0.030)
	}
}

// TestPickPromptLearntSpill: the same state picked by the default (the load
// bound) and by SpillTime once its model has learnt the times. The
// prompt's holder has one request ahead, within the bound; the other
// backend holds nothing, but 10 blocks of prefill (30 ms) cost less than a
// 60 ms wait.
func TestPickPromptLearntSpill(t *testing.T) {
	hashes := make([]uint64, 10)
	for i := range hashes {
		hashes[i] = uint64(100 + i)
	}
	state := func() []*Upstream {
		a, b := newUpstream("a", "p", "a:1", 100, true), newUpstream("b", "p", "b:1", 100, true)
		for _, u := range []*Upstream{a, b} {
			u.concBits.Store(math.Float64bits(8))
		}
		a.blocks.record(hashes, 100)
		a.inflight.Store(8) // one ahead: load 3
		b.inflight.Store(4) // half full: load 1.5
		return []*Upstream{a, b}
	}
	train := func(p *PrefixAware) {
		for i := range prefillMinSamples {
			x := []int{2, 40}[i%2]
			p.observe(prefixPick{uncached: x, ok: true}, time.Duration(20+3*x)*time.Millisecond)
		}
		for range slotMinSamples {
			p.observe(prefixPick{uncached: 2, ahead: 1, ok: true}, (20+6+60)*time.Millisecond)
		}
	}
	def := &PrefixAware{}
	train(def)
	if _, _, ok := def.Learnt(); ok {
		t.Fatal("the default policy learns (SpillBound)")
	}
	if u, pick := def.pickPrompt(state(), hashes); u.id != "a" || pick.uncached != 0 || pick.ahead != 1 {
		t.Fatalf("default picked %s (%+v), want the holder a within its bound", u.id, pick)
	}
	learnt := &PrefixAware{Spill: SpillTime}
	if u, _ := learnt.pickPrompt(state(), hashes); u.id != "a" {
		t.Fatalf("untrained learnt policy picked %s, want the bound's a", u.id)
	}
	train(learnt)
	block, slot, ok := learnt.Learnt()
	if !ok || (block-3*time.Millisecond).Abs() > 10*time.Microsecond || (slot-60*time.Millisecond).Abs() > time.Millisecond {
		t.Fatalf("learnt %v, %v, %v; want 3ms, 60ms", block, slot, ok)
	}
	if u, pick := learnt.pickPrompt(state(), hashes); u.id != "b" || pick.uncached != 10 || pick.ahead != 0 {
		t.Fatalf("learnt policy picked %s (%+v), want b: 30 ms of prefill beat a 60 ms wait", u.id, pick)
	}
	bounded := &PrefixAware{Spill: SpillBoundedTime}
	train(bounded)
	if u, _ := bounded.pickPrompt(state(), hashes); u.id != "b" {
		t.Fatalf("bounded-time policy picked %s, want b: a is within the bound, but its wait costs more", u.id)
	}
}

// BenchmarkBlockIndexRecord: recording a 64-block prompt (4 KiB at the
// default block) into a full index of the default size, new each time or
// already held, beside the exact LRU it approximates (listLRU). The
// allocations it reports are asserted by TestBlockIndexRecordAllocations.
//
//	go test -run XXX -bench BlockIndexRecord -benchmem ./internal/gateway/
func BenchmarkBlockIndexRecord(b *testing.B) {
	type recorder interface{ record([]uint64, int) }
	prompt := make([]uint64, 64)
	next := uint64(0)
	fresh := func() {
		for i := range prompt {
			prompt[i] = (next + 1) * 0x9E3779B97F4A7C15 // spread as hashes are
			next++
		}
	}
	for _, impl := range []struct {
		name string
		r    recorder
	}{{"sets", &blockIndex{}}, {"list", &listLRU{}}} {
		for range DefaultPrefixIndexBlocks / len(prompt) { // full
			fresh()
			impl.r.record(prompt, DefaultPrefixIndexBlocks)
		}
		b.Run(impl.name+"/new", func(b *testing.B) {
			for b.Loop() {
				fresh()
				impl.r.record(prompt, DefaultPrefixIndexBlocks)
			}
		})
		b.Run(impl.name+"/held", func(b *testing.B) {
			for b.Loop() {
				impl.r.record(prompt, DefaultPrefixIndexBlocks)
			}
		})
	}
	// Cold: new prompts dealt over 32 full indexes (8 MiB of sets), as a
	// gateway in front of many backends, sharing its cores with the kernel
	// and its neighbours, finds them: most sets are not in cache.
	cold := make([]blockIndex, 32)
	for i := range cold {
		for range DefaultPrefixIndexBlocks / len(prompt) {
			fresh()
			cold[i].record(prompt, DefaultPrefixIndexBlocks)
		}
	}
	b.Run("sets/new-cold", func(b *testing.B) {
		i := 0
		for b.Loop() {
			fresh()
			cold[i%len(cold)].record(prompt, DefaultPrefixIndexBlocks)
			i++
		}
	})
}
