package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// maxSet is the most files of the root package that may reach each other
// by the names they use. The queue core's issue set it at 20 (44 files
// before); the engine's issue brought it to 14 by cutting every call from
// the queue engine up into its features (queueHooks) and giving the types
// the engine keeps (reservation, TaskStatus, DependencyState, GroupLimits)
// files of their own. The rest goes with the engine's move into internal/.
// A set this large means a file that everything uses names one of its
// users, as fleet.go holding a flow type did.
const maxSet = 10

// TestRootGraph keeps the root package's largest strongly connected set
// of files within maxSet, and says which files and edges hold it when not.
func TestRootGraph(t *testing.T) {
	g, err := load("../..", false)
	if err != nil {
		t.Fatal(err)
	}
	sets := g.sets()
	if len(g.nodes) < 50 || len(sets) == 0 {
		t.Fatalf("read %d files, %d sets: not the root package", len(g.nodes), len(sets))
	}
	if n := len(sets[0]); n > maxSet {
		in := map[string]bool{}
		for _, f := range sets[0] {
			in[f] = true
		}
		var edges []string
		for _, from := range sets[0] {
			for to, names := range g.edges[from] {
				if in[to] {
					edges = append(edges, from+" -> "+to+": "+strings.Join(names, " "))
				}
			}
		}
		t.Fatalf("the largest strongly connected set of root files has %d files, more than %d: %s\nedges (go run ./internal/filegraph -v . to see them all):\n%s",
			n, maxSet, strings.Join(sets[0], " "), strings.Join(edges, "\n"))
	}
	t.Logf("files %d, lines %d, largest set %d: %s", len(g.nodes), g.lines, len(sets[0]), strings.Join(sets[0], " "))
}

// TestArchitectureMap keeps ARCHITECTURE.md true to the tree: every path
// it names in backquotes (a package under internal/, a root file, a script,
// a folder, or a glob such as queue_*.go) exists.
func TestArchitectureMap(t *testing.T) {
	b, err := os.ReadFile("../../ARCHITECTURE.md")
	if err != nil {
		t.Fatalf("ARCHITECTURE.md: %v", err)
	}
	named := 0
	for _, m := range regexp.MustCompile("`([A-Za-z0-9_*./-]+)`").FindAllStringSubmatch(string(b), -1) {
		p := m[1]
		if !strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, ".lua") && !strings.HasSuffix(p, ".md") && !strings.HasSuffix(p, "/") && !strings.HasPrefix(p, "internal/") {
			continue // a name of code, not a path
		}
		named++
		got, err := filepath.Glob(filepath.Join("../..", strings.TrimSuffix(p, "/")))
		if err != nil || len(got) == 0 {
			t.Errorf("ARCHITECTURE.md names %s, which does not exist", p)
		}
	}
	if named < 30 {
		t.Errorf("ARCHITECTURE.md names %d paths: not the map", named)
	}
}
