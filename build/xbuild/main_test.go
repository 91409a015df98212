package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLoadRepositoryManifest(t *testing.T) {
	b, err := load("../../xcaddy.json")
	if err != nil {
		t.Fatal(err)
	}
	if b.CaddyVersion != "v2.11.9" {
		t.Errorf("caddy_version = %q, want v2.11.9", b.CaddyVersion)
	}
	found := false
	for _, p := range b.Plugins {
		found = found || p.PackagePath == "github.com/sglroute/sglroute"
	}
	if !found {
		t.Errorf("plugins %v lack github.com/sglroute/sglroute", b.Plugins)
	}
	root, _ := filepath.Abs("../..")
	if len(b.Replacements) != 1 || string(b.Replacements[0].New) != root {
		t.Errorf("replacements = %v, want the repository root %s", b.Replacements, root)
	}
}

func TestLoadRejectsUnknownFieldsAndMissingVersion(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"unknown":   `{"caddy_version":"v2.11.9","plugin":[]}`,
		"noversion": `{"plugins":[]}`,
	} {
		p := filepath.Join(dir, name+".json")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := load(p); err == nil {
			t.Errorf("%s: load accepted %s", name, body)
		}
	}
}
