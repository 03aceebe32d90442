package sim

import (
	"hash/fnv"
	"strings"
)

// poem is the text the simulator "generates", cycled word by word. It is
// original to this package.
const poem = `the tide comes in on silver sand
and every token finds its place
a thousand lamps across the land
keep time with one unhurried pace
the engines hum beneath the moon
the queue grows short the answers flow
and every prompt is answered soon
by patient workers row by row
潮水 涨 了 又 退 去
灯火 映 着 远方 的 海`

// poemTokens holds the words of poem, each with its trailing separator (a
// space, or a newline at the end of a line), so concatenated tokens read
// like the poem.
var poemTokens = func() []string {
	var toks []string
	for _, line := range strings.Split(poem, "\n") {
		words := strings.Fields(line)
		for i, w := range words {
			if i == len(words)-1 {
				toks = append(toks, w+"\n")
			} else {
				toks = append(toks, w+" ")
			}
		}
	}
	return toks
}()

// textSeed picks the position in the poem where an answer to prompt starts,
// so that equal prompts get equal answers and different prompts usually
// differ.
func textSeed(prompt string) int {
	h := fnv.New32a()
	h.Write([]byte(prompt))
	return int(h.Sum32() % uint32(len(poemTokens)))
}

// tokenText is the i-th generated token of an answer starting at seed.
func tokenText(seed, i int) string {
	return poemTokens[(seed+i)%len(poemTokens)]
}
