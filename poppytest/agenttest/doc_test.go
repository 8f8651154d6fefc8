package agenttest_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The docs and examples never write "agent, _ := agenttest.New(…)" without
// saying what is dropped: the second result is the agent's Identity, and a
// bare "_" reads as a dropped error.
func TestDocsNameTheIdentity(t *testing.T) {
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || (filepath.Ext(path) != ".go" && filepath.Ext(path) != ".md") || strings.HasSuffix(path, "doc_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, ", _ := agenttest.New(") && !strings.Contains(line, "Identity") {
				t.Errorf("%s:%d: the Identity agenttest.New returns is dropped without a word: %s", path, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
