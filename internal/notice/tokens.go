package notice

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"sync"
)

// TokenBytes is the entropy of a generated token.
const TokenBytes = 32

// NewToken returns a fresh random token (crypto/rand, URL-safe base64).
func NewToken() string {
	b := make([]byte, TokenBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand's contract since Go 1.24)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Tokens holds each pool's notice token. Safe for concurrent use.
type Tokens struct {
	mu     sync.RWMutex
	tokens map[string]entry // by pool key (namespace/name)
}

type entry struct {
	token  string
	digest [sha256.Size]byte
}

// NewTokens returns an empty store.
func NewTokens() *Tokens { return &Tokens{tokens: map[string]entry{}} }

// Set gives pool its token (replacing an older one).
func (t *Tokens) Set(pool, token string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tokens[pool] = entry{token: token, digest: sha256.Sum256([]byte(token))}
}

// Delete forgets pool's token.
func (t *Tokens) Delete(pool string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.tokens, pool)
}

// Token returns pool's token, for the bootstrap renderer only.
func (t *Tokens) Token(pool string) (string, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	e, ok := t.tokens[pool]
	return e.token, ok
}

// Verify says whether presented is pool's token, comparing SHA-256
// digests in constant time (the digest hides the token's length too). A
// pool without a token verifies nothing.
func (t *Tokens) Verify(pool, presented string) bool {
	t.mu.RLock()
	e, ok := t.tokens[pool]
	t.mu.RUnlock()
	got := sha256.Sum256([]byte(presented))
	match := subtle.ConstantTimeCompare(got[:], e.digest[:]) == 1
	return ok && presented != "" && match
}
