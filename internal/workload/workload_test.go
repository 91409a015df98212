package workload

import (
	"reflect"
	"testing"
)

func TestGenerateIsDeterministicAndShaped(t *testing.T) {
	w := SharedPrefix{Groups: 16, PromptsPerGroup: 8, SystemChars: 1000, QuestionChars: 60, Seed: 7}
	a, b := w.Generate(), w.Generate()
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed gave different workloads")
	}
	if len(a) != 128 {
		t.Fatalf("len = %d, want 128", len(a))
	}
	perGroup := map[int]int{}
	systems := map[int]string{}
	inOrder := true
	for i, p := range a {
		perGroup[p.Group]++
		if len(p.System) != 1000 || len(p.Question) != 60 {
			t.Fatalf("prompt %d lengths %d/%d", i, len(p.System), len(p.Question))
		}
		if s, ok := systems[p.Group]; ok && s != p.System {
			t.Fatalf("group %d has two system prompts", p.Group)
		}
		systems[p.Group] = p.System
		if i > 0 && p.Group < a[i-1].Group {
			inOrder = false
		}
	}
	for g := 0; g < 16; g++ {
		if perGroup[g] != 8 {
			t.Errorf("group %d has %d prompts", g, perGroup[g])
		}
	}
	if inOrder {
		t.Error("workload is not shuffled")
	}
	if c := (SharedPrefix{Groups: 16, PromptsPerGroup: 8, SystemChars: 1000, QuestionChars: 60, Seed: 8}).Generate(); reflect.DeepEqual(a, c) {
		t.Error("different seeds gave the same workload")
	}
}
