package main

import (
	"strings"
	"testing"
)

// maxSet is the most files of the root package that may reach each other
// by the names they use: the bound the queue core's issue set (44 files
// then; a set this large means a file that everything uses names one of
// its users, as fleet.go holding a flow type did).
const maxSet = 20

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
