package tree

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// Benchmark corpus: for each prompt size S, 10 000 stored prompts built from a
// fixed seed as one of 100 shared "system prompt" prefixes followed by a
// unique random suffix, inserted for 16 tenants (prompt i -> tenant i%16).
// Prefix/suffix split: 1 KiB and 8 KiB use S/2 + S/2; 64 KiB uses a 60 KiB
// prefix + 4 KiB suffix so the tree stays ~46 MB (10 000 distinct 64 KiB
// prompts would be 640 MB). Prompts are assembled into reusable buffers and
// never all materialized at once.

const (
	benchPrompts  = 10000
	benchPrefixes = 100
	benchTenants  = 16
	benchQueries  = 64
)

var benchSizes = []struct {
	name      string
	size, pre int
}{
	{"1KiB", 1 << 10, 1 << 9},
	{"8KiB", 8 << 10, 4 << 10},
	{"64KiB", 64 << 10, 60 << 10},
}

type benchCorpus struct {
	tr       *Tree
	prefixes [][]byte
	queries  [][]byte // stored prompts (full hits)
	qTenant  []TenantID
	tenants  []TenantID
	suffix   int
}

var (
	benchMu    sync.Mutex
	benchCache = map[int]*benchCorpus{}
)

// benchText fills b with pseudo-random text: mostly ASCII words, some CJK.
func benchText(r *rand.Rand, b []byte) {
	const letters = "abcdefghijklmnopqrstuvwxyz      "
	i := 0
	for i < len(b) {
		if r.IntN(64) == 0 && len(b)-i >= 3 {
			c := []byte(string(rune(0x4e00 + r.IntN(0x5000))))
			i += copy(b[i:], c)
			continue
		}
		b[i] = letters[r.IntN(len(letters))]
		i++
	}
}

func suffixFor(i, n int) []byte {
	r := rand.New(rand.NewPCG(uint64(i), 99))
	b := make([]byte, n)
	benchText(r, b)
	return b
}

func corpus(size, pre int) *benchCorpus {
	benchMu.Lock()
	defer benchMu.Unlock()
	if c := benchCache[size]; c != nil {
		return c
	}
	c := &benchCorpus{tr: New(Options{}), suffix: size - pre}
	r := rand.New(rand.NewPCG(42, uint64(size)))
	for i := 0; i < benchPrefixes; i++ {
		p := make([]byte, pre)
		benchText(r, p)
		// Distinct first chars are not required; prefixes share "You are".
		copy(p, fmt.Sprintf("You are assistant #%03d. ", i))
		c.prefixes = append(c.prefixes, p)
	}
	for i := 0; i < benchTenants; i++ {
		c.tenants = append(c.tenants, c.tr.Tenant(fmt.Sprintf("http://worker-%02d:8000", i)))
	}
	buf := make([]byte, size)
	for i := 0; i < benchPrompts; i++ {
		copy(buf, c.prefixes[i%benchPrefixes])
		copy(buf[pre:], suffixFor(i, size-pre))
		c.tr.Insert(buf, c.tenants[i%benchTenants])
		if i%(benchPrompts/benchQueries) == 0 && len(c.queries) < benchQueries {
			c.queries = append(c.queries, bytes.Clone(buf))
			c.qTenant = append(c.qTenant, c.tenants[i%benchTenants])
		}
	}
	benchCache[size] = c
	return c
}

func BenchmarkBytesEqual(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			x := suffixFor(1, sz.size)
			y := bytes.Clone(x)
			b.ReportAllocs()
			b.SetBytes(int64(sz.size))
			for b.Loop() {
				if !bytes.Equal(x, y) {
					b.Fatal("not equal")
				}
			}
		})
	}
}

// BenchmarkMatch: full hit of one stored prompt, repeated (the same bytes as
// the BytesEqual baseline would compare, so the ratio shows tree overhead).
func BenchmarkMatch(b *testing.B) {
	benchHit(b, false, false)
}

// BenchmarkMatchInsertHit is the Select path: Match, then Insert of the
// same (already stored) prompt for the chosen tenant.
func BenchmarkMatchInsertHit(b *testing.B) {
	benchHit(b, true, false)
}

// BenchmarkMatchInsertPathHit is the Select path as sglroute runs it:
// MatchPath, then InsertPath of the same prompt, which stamps the recorded
// path instead of comparing the prompt again.
func BenchmarkMatchInsertPathHit(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			c := corpus(sz.size, sz.pre)
			var p Path
			b.ReportAllocs()
			b.SetBytes(int64(sz.size))
			for b.Loop() {
				m := c.tr.MatchPath(c.queries[3], nil, &p)
				if m.MatchedChars != m.InputChars {
					b.Fatalf("not a full hit: %+v", m)
				}
				c.tr.InsertPath(c.queries[3], m.Tenant, &p)
			}
		})
	}
}

// BenchmarkMatchRotating and BenchmarkMatchInsertHitRotating cycle over 64
// stored prompts (spread over the corpus), so data is mostly not L1-resident.
func BenchmarkMatchRotating(b *testing.B) {
	benchHit(b, false, true)
}

// BenchmarkMatchInsertHitRotating: see BenchmarkMatchRotating.
func BenchmarkMatchInsertHitRotating(b *testing.B) {
	benchHit(b, true, true)
}

func benchHit(b *testing.B, insert, rotate bool) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			c := corpus(sz.size, sz.pre)
			b.ReportAllocs()
			b.SetBytes(int64(sz.size))
			i := 0
			for b.Loop() {
				k := 3
				if rotate {
					k = i % benchQueries
					i++
				}
				m := c.tr.Match(c.queries[k], nil)
				if m.MatchedChars != m.InputChars {
					b.Fatalf("not a full hit: %+v", m)
				}
				if insert {
					c.tr.Insert(c.queries[k], m.Tenant)
				}
			}
		})
	}
}

// BenchmarkInsertNew inserts prompts whose suffix is not yet stored, under
// a dedicated tenant. Every 1024 inserts the timer is stopped and that
// tenant is removed, so the same suffixes are new again and memory stays
// bounded. Each op includes copying the suffix into a prefix buffer.
func BenchmarkInsertNew(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			c := corpus(sz.size, sz.pre)
			id := c.tr.Tenant("http://new-worker:8000")
			const pool = 1024
			sufs := make([][]byte, pool)
			for i := range sufs {
				sufs[i] = suffixFor(benchPrompts+i, c.suffix)
			}
			bufs := make([][]byte, benchPrefixes)
			for i := range bufs {
				bufs[i] = make([]byte, sz.size)
				copy(bufs[i], c.prefixes[i])
			}
			pre := sz.size - c.suffix
			b.ReportAllocs()
			b.SetBytes(int64(sz.size))
			i := 0
			for b.Loop() {
				if i == pool {
					b.StopTimer()
					c.tr.RemoveTenant(id)
					i = 0
					b.StartTimer()
				}
				buf := bufs[i%benchPrefixes]
				copy(buf[pre:], sufs[i])
				c.tr.Insert(buf, id)
				i++
			}
			b.StopTimer()
			c.tr.RemoveTenant(id)
		})
	}
}

func BenchmarkMatchParallel(b *testing.B) {
	c := corpus(8<<10, 4<<10)
	b.ReportAllocs()
	b.SetBytes(8 << 10)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			q := c.queries[i%benchQueries]
			i++
			c.tr.Match(q, nil)
		}
	})
}

// BenchmarkMatchInsertParallel runs the Select path (Match + re-Insert of a
// stored prompt) from all goroutines at once.
func BenchmarkMatchInsertParallel(b *testing.B) {
	c := corpus(8<<10, 4<<10)
	b.ReportAllocs()
	b.SetBytes(8 << 10)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			k := i % benchQueries
			i++
			m := c.tr.Match(c.queries[k], nil)
			c.tr.Insert(c.queries[k], m.Tenant)
		}
	})
}
