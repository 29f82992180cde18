package main

import (
	"bytes"
	"testing"

	"github.com/rs/zerolog"
)

// TestAProductionBuildKeepsTheProtection: only a build with the
// lockgate_unprotected tag reads the switch that turns the data-loss
// protection off; any other ignores it, and says nothing about it.
func TestAProductionBuildKeepsTheProtection(t *testing.T) {
	var out bytes.Buffer
	getenv := func(k string) string {
		if k == unprotectedEnv {
			return "1"
		}
		return ""
	}
	got := unprotectedMode(getenv, zerolog.New(&out))
	if got != unprotectedBuild {
		t.Fatalf("unprotectedMode with %s=1 = %v in a build where unprotectedBuild = %v", unprotectedEnv, got, unprotectedBuild)
	}
	if !unprotectedBuild && out.Len() != 0 {
		t.Errorf("a production build logged about the switch: %s", out.String())
	}
	if unprotectedBuild && !bytes.Contains(out.Bytes(), []byte("UNSAFE")) {
		t.Errorf("an unprotected build did not warn: %q", out.String())
	}
}
