// Package workload generates deterministic LLM request workloads for the
// end-to-end tests and the benchmark harness, after SGLang's
// generated-shared-prefix (GSP) benchmark dataset: groups of prompts that
// share a long system prompt and differ in a short question.
package workload

import (
	"math/rand/v2"
	"strings"
)

// SharedPrefix describes a GSP-style workload.
type SharedPrefix struct {
	Groups          int    // distinct system prompts
	PromptsPerGroup int    // questions per system prompt
	SystemChars     int    // length of each system prompt in characters
	QuestionChars   int    // length of each question in characters
	Seed            uint64 // same seed, same prompts in the same order
	Ordered         bool   // keep group order instead of shuffling (GSP shuffles by default)
}

// Prompt is one request of a workload.
type Prompt struct {
	Group    int
	System   string
	Question string
}

var vocabulary = strings.Fields(`the of and to in is you that it he was for on are as with his they at be
this have from or one had by word but not what all were we when your can said there use an each which she do
how their if will up other about out many then them these so some her would make like him into time has look
two more write go see number no way could people my than first water been call who oil its now find long down
day did get come made may part over new sound take only little work know place year live me back give most very
after thing our just name good sentence man think say great where help through much before line right too mean
old any same tell boy follow came want show also around form three small set put end does another well large
must big even such because turn here why ask went men read need land different home us move try kind hand
picture again change off play spell air away animal house point page letter mother answer found study still
learn should America world high every near add food between own below country plant last school father keep
tree never start city earth eye light thought head under story saw left few while along might close something`)

// Generate returns the workload's prompts: Groups*PromptsPerGroup of them,
// shuffled unless Ordered.
func (w SharedPrefix) Generate() []Prompt {
	rng := rand.New(rand.NewPCG(w.Seed, 0x5eed))
	systems := make([]string, w.Groups)
	for g := range systems {
		systems[g] = text(rng, w.SystemChars)
	}
	out := make([]Prompt, 0, w.Groups*w.PromptsPerGroup)
	for g := 0; g < w.Groups; g++ {
		for q := 0; q < w.PromptsPerGroup; q++ {
			out = append(out, Prompt{Group: g, System: systems[g], Question: text(rng, w.QuestionChars)})
		}
	}
	if !w.Ordered {
		rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	}
	return out
}

// text returns n characters of space-separated vocabulary words.
func text(rng *rand.Rand, n int) string {
	var b strings.Builder
	b.Grow(n + 16)
	for b.Len() < n {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(vocabulary[rng.IntN(len(vocabulary))])
	}
	return b.String()[:n]
}
