package sim

import (
	"container/list"
	"encoding/binary"
	"hash/fnv"
	"sync"
)

// DefaultPrefixBlockTokens is the block size of the prefix cache, vLLM's
// default (--block-size 16).
const DefaultPrefixBlockTokens = 16

// prefixCache is the simulated KV cache of one backend with automatic
// prefix caching, after vLLM's
// (https://docs.vllm.ai/en/latest/design/prefix_caching.html): a prompt's
// tokens are cut into blocks of blockTokens, each full block named by a
// hash of its tokens chained with the previous block's hash (so a block
// is shared only by prompts equal up to its end), and a request reuses the
// longest run of its leading blocks that the cache holds. The cache holds
// at most capBlocks blocks and evicts the least recently used; among the
// blocks of one request, which share their last use, the deepest go first
// (vLLM frees a finished request's blocks tail first, so that "if the last
// accessed time is the same, [it frees] the one with longer prefix
// lengths first", the policy of the automatic prefix caching RFC,
// vllm-project/vllm#2614): a shared system prompt outlives the histories
// built on it. Unlike vLLM it does not pin the blocks of running requests:
// a block is cached as soon as its request is admitted and may be evicted
// while the request runs (the request's timing is already decided). Safe
// for concurrent use.
type prefixCache struct {
	blockTokens int
	capBlocks   int

	mu    sync.Mutex
	lru   list.List // of uint64 block hashes, front is most recent
	index map[uint64]*list.Element
}

// newPrefixCache returns a cache of capacityTokens tokens in blocks of
// blockTokens (DefaultPrefixBlockTokens if not positive); nil when
// capacityTokens holds no whole block (prefix caching off).
func newPrefixCache(capacityTokens, blockTokens int) *prefixCache {
	if blockTokens <= 0 {
		blockTokens = DefaultPrefixBlockTokens
	}
	if capacityTokens < blockTokens {
		return nil
	}
	return &prefixCache{blockTokens: blockTokens, capBlocks: capacityTokens / blockTokens, index: map[uint64]*list.Element{}}
}

// blockHashes returns the chained hashes of the full blocks of tokens,
// seeded with the model name: the same tokens under another model (or
// another LoRA adapter, which vLLM serves under its own model name) are
// other blocks. Pure.
func blockHashes(model string, tokens []uint32, blockTokens int) []uint64 {
	n := len(tokens) / blockTokens
	out := make([]uint64, n)
	h := fnv.New64a()
	h.Write([]byte(model))
	prev := h.Sum64()
	var buf [8]byte
	for i := range n {
		h.Reset()
		binary.LittleEndian.PutUint64(buf[:], prev)
		h.Write(buf[:])
		for _, t := range tokens[i*blockTokens : (i+1)*blockTokens] {
			binary.LittleEndian.PutUint32(buf[:4], t)
			h.Write(buf[:4])
		}
		prev = h.Sum64()
		out[i] = prev
	}
	return out
}

// admit looks a prompt of tokens up and stores its blocks: it returns the
// number of prompt tokens served from the cache (the leading blocks it
// held, in whole blocks) and marks every full block of the prompt most
// recently used, its first block last (so the deepest are evicted first),
// inserting the missing ones and evicting the least recently used beyond
// the capacity.
func (c *prefixCache) admit(model string, tokens []uint32) (hitTokens int) {
	hashes := blockHashes(model, tokens, c.blockTokens)
	c.mu.Lock()
	defer c.mu.Unlock()
	hit := 0
	for hit < len(hashes) && c.index[hashes[hit]] != nil {
		hit++
	}
	for i := len(hashes) - 1; i >= 0; i-- {
		if e, ok := c.index[hashes[i]]; ok {
			c.lru.MoveToFront(e)
		} else {
			c.index[hashes[i]] = c.lru.PushFront(hashes[i])
		}
	}
	for c.lru.Len() > c.capBlocks {
		e := c.lru.Back()
		delete(c.index, c.lru.Remove(e).(uint64))
	}
	return hit * c.blockTokens
}

// usage returns the fraction of the capacity holding cached blocks.
func (c *prefixCache) usage() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return float64(c.lru.Len()) / float64(c.capBlocks)
}

// uncachedTokens returns how many of req's prompt tokens must be prefilled:
// with a prefix cache, its tokens less those the cache held (counted in
// vLLM's prefix-cache counters); without one, the prompt's estimated size.
func (s *Server) uncachedTokens(req genRequest, model string) int {
	if s.cache == nil {
		return req.promptTokens
	}
	tokens := tokenize(req.prompt)
	hit := s.cache.admit(model, tokens)
	s.met.prefixQueries.WithLabelValues(model).Add(float64(len(tokens)))
	s.met.prefixHits.WithLabelValues(model).Add(float64(hit))
	return len(tokens) - hit
}
