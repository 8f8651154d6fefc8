package headless

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	jwt := "eyJ0eXAiOiJwb3BweS1icm93c2VyK2p3dCJ9.eyJpc3MiOiJ4In0.c2lnbmF0dXJl"
	got := redact(`could not unmarshal event: {"postData":"assertion=` + jwt + `"}` + strings.Repeat("x", 600))
	if strings.Contains(got, jwt[40:]) || !strings.Contains(got, "[JWT redacted]") || len(got) > 520 {
		t.Fatalf("redact = %q", got)
	}
}
