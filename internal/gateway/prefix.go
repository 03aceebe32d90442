package gateway

import (
	"encoding/binary"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"k8s.io/utils/clock"
)

// Defaults of the prefix-aware policy.
const (
	// DefaultPrefixIndexBlocks is how many prefix blocks the gateway
	// remembers per backend: 32768 blocks of 64 bytes, about 500,000
	// tokens, the KV cache of a large GPU serving a mid-size model. A
	// backend that holds less evicts sooner than the gateway forgets,
	// which only costs a miss there; the bound on load keeps a backend the
	// index overrates from drawing more than its share. Size it like the
	// backends' caches (PrefixAware.IndexBlocks): a gateway that remembers
	// far more than they hold sends conversations where their prefix was
	// evicted.
	DefaultPrefixIndexBlocks = 1 << 15
	// DefaultPrefixLoadBound is how much more loaded than the least loaded
	// candidate a backend holding a longer prefix may be and still get the
	// request: a hot prefix spills to other backends once its home is twice
	// as loaded. Load is Score's work: an idle backend counts 1, a full
	// batch 2, and each request that would wait for a slot one more; so the
	// home keeps a prefix while its batch has room and spills as soon as a
	// request would wait for a slot while another backend is nearly idle.
	// bench/prefix measured 2, 3 and 5 (BENCHMARKS.md): waiting in the
	// home's queue for a slot cost more than prefilling again elsewhere.
	DefaultPrefixLoadBound = 2.0
)

// PrefixAware is the default policy: prefix-cache affinity with a bound on
// load, over the least-cost picker.
//
// The gateway has the buffered body before it picks, so for the generation
// APIs (see promptText) it hashes the prompt's leading blocks of
// BlockBytes, chained (block i's hash covers the model and all bytes up to
// the end of block i), and keeps per backend an LRU index of the blocks it
// sent there — an approximation of the backend's own prefix cache, as the
// Gateway API Inference Extension's prefix plugin keeps. For each
// candidate it knows the number of leading blocks the backend should still
// hold, its load — the work of Score without the latency pace: in-flight
// requests and queue, a request inside a free batch slot counting 1/B —
// and its cost, the full Score (see Score; both on the signals all
// candidates have). Then (prefixChoose):
//
//   - a candidate whose load is above LoadBound × the least loaded one's
//     is out (bounded load: a hot prefix spills instead of melting its
//     home). The bound leaves latency out: a backend's recent TTFT is
//     mostly the prompts it had to prefill, which affinity is there to
//     avoid, and bounding on it made conversations leave the backend that
//     had just cached their prefix. So with a prefix signal, a slower
//     backend's speed counts only through the load it builds up;
//   - among the others, the one holding the longest prefix wins, the
//     cheaper on a tie;
//   - if none holds any, the request goes to the prefix's home: the
//     candidate ranked first by rendezvous hashing of the first block's
//     hash and the backend's ID — consistent hashing, so a new system
//     prompt lands on one backend (the same one on every gateway replica)
//     instead of being prefilled on all, and losing a backend moves only
//     the prefixes it was home to.
//
// With Spill SpillTime (an experiment, off by default), that bound is the
// rule only until the policy has learnt what a spill costs; then it picks
// by expected time to first token instead (prefixChooseTime,
// prefixcost.go): on each candidate, the requests the
// new one would wait behind for a batch slot times the learnt wait per
// request ahead, plus the prompt's blocks the candidate does not hold times
// the learnt prefill time per block; the lowest wins, ties as above. Both
// times are fitted to the TTFT of the gateway's own streamed responses
// against what it expected when it picked them (prefillModel). So a
// conversation whose history is long stays on its backend through a short
// queue, a new conversation of a busy tenant goes to another backend
// holding the tenant's system prompt with a free slot, and a prefix whose
// every holder queues longer than its prefill takes a second home (which
// then holds it) instead of queueing there. The bound stays for candidates
// whose batch size is unknown (no metrics). Measured, the rule is greedy:
// it keeps requests in a holder's queue as long as each one's own wait is
// below its prefill elsewhere, blind to the requests queued behind it and
// to the later requests a second home would serve, and it was not better
// than the bound.
//
// A multi-turn chat repeats its history, so its next turn holds the
// longest prefix where its previous turn went: session affinity without a
// session header. A request without one full block of prompt (a short
// prompt, another API, a body that does not parse) has no prefix signal and
// goes to the least-cost candidate (LeastCost).
//
// vLLM can publish the blocks it holds (KV events over ZeroMQ, which the
// "precise" scorer of llm-d reads); the gateway does not use them: they
// exist for vLLM only (not Ollama, llama.cpp, SGLang's own format), need a
// subscription per backend and the backend's tokenizer to map text to its
// block hashes, and the approximate index comes close where the gateway
// sees all of a pool's traffic. Where it does not (several gateway
// replicas), the replicas agree on the homes of new prefixes, and a wrong
// guess costs one miss, bounded by LoadBound.
type PrefixAware struct {
	// BlockBytes is the block size in bytes of prompt text; 0 means
	// DefaultPrefixBlockBytes.
	BlockBytes int
	// IndexBlocks is how many blocks are remembered per backend; 0 means
	// DefaultPrefixIndexBlocks.
	IndexBlocks int
	// LoadBound is the bound on load (see above); 0 means
	// DefaultPrefixLoadBound. Values below 1 count as 1: only the cheapest.
	LoadBound float64
	// Clock, MaxAge and Decay are as in P2C; New sets them from Options.
	Clock  clock.PassiveClock
	MaxAge time.Duration
	Decay  time.Duration
	// Rand returns a uniform number in [0, n) for tie breaking; nil means
	// math/rand/v2.
	Rand func(n int) int
	// Spill is the rule that decides when a request leaves the backend
	// holding its longest prefix (see PrefixSpill); the zero value is
	// SpillBound.
	Spill PrefixSpill

	// model learns the prefill time per block and the wait per request
	// ahead from the responses (see prefixcost.go).
	model prefillModel
}

// Pick implements Policy without a body: the least-cost candidate. The
// gateway calls pickPrompt instead when it has the request's prompt.
func (p *PrefixAware) Pick(cands []*Upstream, _ *http.Request) *Upstream {
	if len(cands) == 1 {
		return cands[0]
	}
	var buf [16]float64
	var ibuf [16]int64
	in := ibuf[:0]
	for _, u := range cands {
		in = append(in, u.InFlight())
	}
	return cands[leastCost(p.costs(cands, buf[:0]), in, p.draw())]
}

// pickPrompt picks for a request whose prompt's block hashes are hashes
// (nil: no prefix signal) and returns what it expected of the pick, for
// observe.
func (p *PrefixAware) pickPrompt(cands []*Upstream, hashes []uint64) (*Upstream, prefixPick) {
	if len(hashes) == 0 {
		return p.Pick(cands, nil), prefixPick{}
	}
	var buf [16]prefixCand
	var lbuf [16]Load
	pc := buf[:0]
	loads := p.loads(cands, lbuf[:0])
	paced := commonBasis(loads)
	unpaced := paced
	unpaced.TTFT, unpaced.Latency = false, false
	known := true
	for i, u := range cands {
		c := prefixCand{
			matched: u.blocks.matched(hashes),
			load:    Score(loads[i], unpaced),
			cost:    Score(loads[i], paced),
			rank:    rendezvous(hashes[0], u.id),
			ahead:   ahead(loads[i], unpaced),
		}
		known = known && c.ahead >= 0
		pc = append(pc, c)
	}
	var i int
	block, slot, learnt := p.model.times()
	switch {
	case !learnt || !known || p.Spill == SpillBound:
		i = prefixChoose(pc, p.bound())
	case p.Spill == SpillTime:
		i = prefixChooseTime(pc, len(hashes), block, slot)
	default: // SpillBoundedTime
		i = prefixChooseBoundedTime(pc, p.bound(), len(hashes), block, slot)
	}
	return cands[i], prefixPick{uncached: len(hashes) - pc[i].matched, ahead: pc[i].ahead, ok: true}
}

// Learnt returns the prefill time per uncached block and the wait per
// request ahead the policy has learnt, and whether it spills on them yet
// (see prefixcost.go).
func (p *PrefixAware) Learnt() (block, slot time.Duration, ok bool) {
	b, s, ok := p.model.times()
	return time.Duration(b * float64(time.Second)), time.Duration(s * float64(time.Second)), ok
}

// observe learns from the time to first token of a streamed response to a
// request picked as pick.
func (p *PrefixAware) observe(pick prefixPick, ttft time.Duration) {
	if p.Spill != SpillBound {
		p.model.observe(pick, ttft)
	}
}

// record remembers that u was sent the blocks hashes.
func (p *PrefixAware) record(u *Upstream, hashes []uint64) {
	if len(hashes) > 0 {
		u.blocks.record(hashes, p.indexBlocks())
	}
}

func (p *PrefixAware) blockBytes() int { return orInt(p.BlockBytes, DefaultPrefixBlockBytes) }

func (p *PrefixAware) indexBlocks() int { return orInt(p.IndexBlocks, DefaultPrefixIndexBlocks) }

func orInt(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

func (p *PrefixAware) bound() float64 {
	if p.LoadBound == 0 {
		return DefaultPrefixLoadBound
	}
	return max(p.LoadBound, 1)
}

func (p *PrefixAware) draw() func(int) int {
	if p.Rand != nil {
		return p.Rand
	}
	return rand.IntN
}

// costs appends the Score of each candidate, on the signals they all have.
func (p *PrefixAware) costs(cands []*Upstream, out []float64) []float64 {
	var buf [16]Load
	loads := p.loads(cands, buf[:0])
	basis := commonBasis(loads)
	for _, l := range loads {
		out = append(out, Score(l, basis))
	}
	return out
}

// loads appends each candidate's Load now.
func (p *PrefixAware) loads(cands []*Upstream, out []Load) []Load {
	var now time.Time
	if p.Clock != nil {
		now = p.Clock.Now()
	} else {
		now = time.Now()
	}
	maxAge, decay := cmp(p.MaxAge, DefaultMetricsMaxAge), cmp(p.Decay, DefaultLatencyDecay)
	for _, u := range cands {
		out = append(out, u.Load(now, maxAge, decay))
	}
	return out
}

// commonBasis is the Basis of a comparison among all of loads: a signal
// counts if every one has it (see Compare for two). Pure.
func commonBasis(loads []Load) Basis {
	b := Basis{TTFT: true, Latency: true, Metrics: true, Concurrency: true}
	for _, l := range loads {
		b.TTFT = b.TTFT && l.TTFT > 0
		b.Latency = b.Latency && l.Latency > 0
		b.Metrics = b.Metrics && l.Fresh
		b.Concurrency = b.Concurrency && l.Concurrency > 0
	}
	return b
}

// LeastCost is the load-only picker of the default policy, also a policy
// of its own ("least-cost"): the candidate with the lowest Score on the
// signals all candidates have, or near it (see leastCost), the one with
// the fewest requests in flight, ties broken at random. Score is the
// expected cost of one more request — paced by the backend's measured
// latency, a request inside a free batch slot costing s/B (s the batch's
// slowdown, fullBatchSlowdown) and one that would queue a whole unit —
// so a backend three times slower gets a request only when the faster
// ones are three times as loaded: queueing, not while they have free
// slots. Unlike P2C, which compares two random
// candidates, it scans all (pools are tens of backends); the gateway's
// in-flight count, part of every score and current at each pick, and the
// tolerance keep it from herding on one backend between metrics reads.
type LeastCost struct{ PrefixAware }

// Pick implements Policy.
func (p *LeastCost) Pick(cands []*Upstream, r *http.Request) *Upstream {
	return p.PrefixAware.Pick(cands, r)
}

// leastCostTolerance is how far above the lowest score a candidate still
// counts as cheapest for LeastCost (see leastCost).
const leastCostTolerance = 0.5

// leastCost returns the index of the candidate LeastCost picks: among
// those whose cost is within (1+leastCostTolerance) × the lowest (at least
// one), the one with the fewest requests in flight, a tie broken by draw(n)
// uniform in [0, n) (reservoir sampling). The tolerance keeps one spike of
// a backend's latency estimate — the peak EWMA jumps to any slow answer —
// from sending every request to the one backend that happens to look
// fastest until its batch is full; a backend three times slower stays
// outside it while the others have free slots. Pure given draw.
func leastCost(costs []float64, inflight []int64, draw func(int) int) int {
	minCost := costs[0]
	for _, c := range costs[1:] {
		minCost = min(minCost, c)
	}
	limit := (1 + leastCostTolerance) * minCost
	best, ties := -1, 0
	for i, c := range costs {
		if c > limit && c != minCost {
			continue
		}
		switch {
		case best < 0 || inflight[i] < inflight[best]:
			best, ties = i, 1
		case inflight[i] == inflight[best]:
			ties++
			if draw(ties) == 0 {
				best = i
			}
		}
	}
	return best
}

// prefixCand is what prefixChoose knows of one candidate.
type prefixCand struct {
	matched int     // leading blocks of the prompt the backend should hold
	load    float64 // Score without the latency pace: the work there
	cost    float64 // Score
	rank    uint64  // rendezvous rank for the prompt's first block
	ahead   float64 // requests one more would wait behind there; < 0: unknown
}

// prefixChoose returns the index of the candidate the prefix-aware policy
// picks (see PrefixAware): among those whose load is at most bound × the
// lowest, the longest match, then the lowest cost, then the highest rank;
// with no match among them, the highest rank. Pure.
func prefixChoose(cs []prefixCand, bound float64) int {
	minLoad := cs[0].load
	for _, c := range cs[1:] {
		minLoad = min(minLoad, c.load)
	}
	limit := bound * minLoad
	best := -1
	for i, c := range cs {
		if c.load > limit && c.load != minLoad {
			continue
		}
		if best < 0 || better(c, cs[best]) {
			best = i
		}
	}
	return best
}

// better orders candidates for prefixChoose.
func better(a, b prefixCand) bool {
	if a.matched != b.matched {
		return a.matched > b.matched
	}
	if a.matched > 0 && a.cost != b.cost {
		return a.cost < b.cost
	}
	return a.rank > b.rank
}

// rendezvous is the rendezvous (highest random weight) hash of a prefix
// key and a backend ID. Pure.
func rendezvous(key uint64, id string) uint64 {
	var d xxhash.Digest
	d.Reset()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], key)
	d.Write(b[:])
	d.WriteString(id)
	return d.Sum64()
}

// blockIndex is the gateway's memory of the prefix blocks sent to one
// backend: a set of block hashes with the capacity of the backend's KV
// cache, evicting the least recently sent, as that cache does. Safe for
// concurrent use; the zero value is empty.
//
// It is set-associative, as a processor's cache is: a block's hash chooses
// one set of up to eight ways, and a new block takes the place of the
// least recent block of its set, not of the whole index. So a block costs
// one cache line of the index, read and written in place: no map, no
// recency list, no allocation once the index is made (it is made whole,
// 8 bytes a block: 256 KiB at the default 32,768, when the backend's first
// prompt is recorded). An exact LRU (a map and a linked list) took a
// lookup, an eviction and an insertion in a map per new block, each a
// cache miss in a table that does not fit a core's cache: 5-6 µs per new
// 4 KiB prompt against about 1 µs here (BenchmarkBlockIndexRecord). What it
// gives up: a block is evicted when eight more recent blocks share its set,
// not when capacity more recent blocks exist anywhere, so near the end of
// its life a block may go a little before or after the exact LRU's choice
// (TestBlockIndexCloseToLRU measures how little); an index of at most
// eight blocks is one set, and exactly LRU. Written here: no library keeps
// a bounded set of integers this way.
//
// A prompt's blocks are stamped with its first block the most recent, so
// that within a set a prompt's deepest blocks go first; matched assumes the
// held blocks of a prompt are leading ones (binary search), which holds
// but for a block evicted across sets ahead of a deeper one, near the end
// of their life, where it may count a few blocks past the gap. A changed
// capacity empties the index (it is a configuration change; the blocks'
// places depend on the number of sets).
type blockIndex struct {
	mu       sync.Mutex
	sets     []blockSet
	capacity int // of the sets as made
	ways     int // of each set from wide on; sets before wide have one more
	wide     int
	held     int    // blocks held
	clock    uint32 // the last stamp given; a way's stamp orders its set
	touched  uint32 // record's first pass (so it is not left out)
}

// blockWays is the number of ways of a set: eight 8-byte ways make one
// 64-byte cache line.
const blockWays = 8

// blockSet is one set: way w holds the block whose tag is tag[w], last
// sent at stamp[w] (0: the way is empty).
type blockSet struct {
	tag   [blockWays]uint32
	stamp [blockWays]uint32
}

// place returns the set and the tag of a block's hash. The hash is mixed
// by an odd multiplier (a bijection) so that hashes that differ only in a
// few bits (tests use small integers) still spread; its high half chooses
// the set by a multiply-shift (any number of sets), its low half is the
// tag: two blocks are confused only if both halves agree, about one in
// 2^32 for blocks of the same set.
func (x *blockIndex) place(h uint64) (set int, tag uint32) {
	m := h * 0x9E3779B97F4A7C15
	return int(uint64(uint32(m>>32)) * uint64(len(x.sets)) >> 32), uint32(m)
}

// waysOf returns the number of ways of set i.
func (x *blockIndex) waysOf(i int) int {
	if i < x.wide {
		return x.ways + 1
	}
	return x.ways
}

// find returns the way of set s (of ways) holding tag, or -1.
func (s *blockSet) find(ways int, tag uint32) int {
	for w := range ways {
		if s.tag[w] == tag && s.stamp[w] != 0 {
			return w
		}
	}
	return -1
}

// matched returns how many leading blocks of hashes the index holds.
func (x *blockIndex) matched(hashes []uint64) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.held == 0 {
		return 0
	}
	gone := func(i int) bool {
		set, tag := x.place(hashes[i])
		return x.sets[set].find(x.waysOf(set), tag) < 0
	}
	// The first block first: a backend that does not hold it, most of a
	// pool's for any one prompt, costs one read, where a binary search
	// from the middle takes about log2(len(hashes)) reads, each waiting on
	// the one before's cache miss. Then a binary search from the middle,
	// not a gallop from the start: the probes near the start stop at the
	// first block evicted ahead of its prompt's deeper ones, and count 9 %
	// fewer blocks held than an exact LRU would (TestBlockIndexCloseToLRU).
	if len(hashes) == 0 || gone(0) {
		return 0
	}
	return 1 + sort.Search(len(hashes)-1, func(j int) bool { return gone(1 + j) })
}

// record stores hashes as most recent, the first block last, each taking
// the place of the least recent block of its set when the set is full.
func (x *blockIndex) record(hashes []uint64, capacity int) {
	capacity = max(capacity, 1)
	x.mu.Lock()
	defer x.mu.Unlock()
	if capacity != x.capacity {
		x.size(capacity)
	}
	// Every block's set is read once first: these reads do not depend on
	// one another, so the processor has their cache misses under way at
	// once, and the loop below, whose turns wait on each other, finds its
	// sets in cache.
	var touch uint32
	for _, h := range hashes {
		set, _ := x.place(h)
		touch += x.sets[set].stamp[0]
	}
	x.touched = touch
	for i := len(hashes) - 1; i >= 0; i-- {
		set, tag := x.place(hashes[i])
		s, ways := &x.sets[set], x.waysOf(set)
		if x.clock == ^uint32(0) {
			x.restamp()
		}
		x.clock++
		w := s.find(ways, tag)
		if w < 0 {
			w = 0
			for v := 1; v < ways; v++ {
				if s.stamp[v] < s.stamp[w] {
					w = v
				}
			}
			if s.stamp[w] == 0 {
				x.held++
			}
			s.tag[w] = tag
		}
		s.stamp[w] = x.clock
	}
}

// size makes the index empty with room for capacity blocks: as few sets
// as hold them, their ways (at most blockWays) adding up to capacity.
func (x *blockIndex) size(capacity int) {
	n := (capacity + blockWays - 1) / blockWays
	x.sets = make([]blockSet, n)
	x.capacity = capacity
	x.ways, x.wide = capacity/n, capacity%n
	x.held, x.clock = 0, 0
}

// restamp renumbers each set's stamps 1, 2, ... in their order, once the
// clock has run out (2^32 blocks recorded): only the order within a set
// counts.
func (x *blockIndex) restamp() {
	var top uint32
	for i := range x.sets {
		s := &x.sets[i]
		var next [blockWays]uint32
		for w, st := range s.stamp {
			if st == 0 {
				continue
			}
			rank := uint32(1)
			for _, o := range s.stamp {
				if o != 0 && o < st {
					rank++
				}
			}
			next[w] = rank
			top = max(top, rank)
		}
		s.stamp = next
	}
	x.clock = top
}

// len returns the number of blocks held.
func (x *blockIndex) len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.held
}
