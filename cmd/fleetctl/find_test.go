package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestFleetctlTaskFind: task find lists the tasks of an indexed metadata
// key and value a page at a time (--limit, --cursor), as a table or as
// JSON, and refuses a key the queue does not index, or no <key>=<value>.
func TestFleetctlTaskFind(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		ctx, f, conn, _ := openTarget(t, tg)
		run := func(args ...string) (string, string, int) { return fctl(t, append(slices.Clone(conn), args...)...) }
		q := fleet.NewQueue[job](f, "finds", fleet.QueueOptions{IndexMeta: []string{"tenant"}})
		var want []string
		for i := range 3 {
			id, err := q.SubmitWith(ctx, job{N: i}, fleet.SubmitOptions{Metadata: map[string]string{"tenant": "acme corp"}})
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, id)
		}
		var got []string
		cursor := ""
		for range 5 {
			args := []string{"--json", "task", "find", "--limit", "2", "finds", "tenant=acme corp"}
			if cursor != "" {
				args = append(args[:3], append([]string{"--cursor", cursor}, args[3:]...)...)
			}
			out, errOut, code := run(args...)
			var page struct {
				Tasks []fleet.TaskRecord `json:"tasks"`
				Next  string             `json:"next"`
			}
			if err := json.Unmarshal([]byte(out), &page); code != 0 || err != nil {
				t.Fatalf("task find: %d %q %q %v", code, out, errOut, err)
			}
			for _, r := range page.Tasks {
				if r.Status != fleet.TaskPending || r.Metadata["tenant"] != "acme corp" {
					t.Fatalf("task find listed %+v", r)
				}
				got = append(got, r.ID)
			}
			if cursor = page.Next; cursor == "" {
				break
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("task find listed %v, want %v", got, want)
		}
		out, _, code := run("task", "find", "--limit", "2", "finds", "tenant=acme corp")
		if code != 0 || !strings.Contains(out, want[0]) || !strings.Contains(out, "pending") || !strings.Contains(out, "next page: --cursor "+want[1]) {
			t.Fatalf("task find table: %d %q", code, out)
		}
		for _, args := range [][]string{{"task", "find", "finds", "site=x"}, {"task", "find", "finds", "tenant"}} {
			if _, _, code := run(args...); code != 2 {
				t.Fatalf("%q: exit %d, want 2", args, code)
			}
		}
	})
}
