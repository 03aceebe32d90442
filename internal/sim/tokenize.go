package sim

import "hash/fnv"

// maxPieceBytes bounds one token of the simulator's tokenizer.
const maxPieceBytes = 4

// tokenize splits text into the simulator's tokens, deterministically: a
// token is a run of whitespace followed by the non-space bytes after it
// (" word", as byte-pair tokenizers keep a word's leading space), cut into
// pieces of at most four bytes, which gives about the one token per four
// bytes of English that real tokenizers do. Each token is the 32-bit FNV-1a
// hash of its bytes. Two texts with a common beginning have the same tokens
// up to the piece where they differ, which is all a prefix cache needs.
// Pure.
func tokenize(text string) []uint32 {
	if text == "" {
		return nil
	}
	out := make([]uint32, 0, len(text)/3+1)
	start := 0
	for start < len(text) {
		end := start
		for end < len(text) && isSpace(text[end]) && end-start < maxPieceBytes {
			end++
		}
		for end < len(text) && !isSpace(text[end]) && end-start < maxPieceBytes {
			end++
		}
		h := fnv.New32a()
		h.Write([]byte(text[start:end]))
		out = append(out, h.Sum32())
		start = end
	}
	return out
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\t' || c == '\r'
}
