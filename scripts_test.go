package fleet

import (
	"crypto/sha1"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"

	"github.com/fleet-go/fleet/internal/engine"
	"github.com/fleet-go/fleet/internal/redistest"
)

// Every script of scripts/ links, and Redis compiles it (SCRIPT LOAD). A
// script that calls a library name the linker left out would compile all
// the same (a global, nil when it runs), so each linked text must also
// declare every library name that it uses, found here apart from the
// linker: a library's "local function name(" and "local a, b =" lines.
func TestScriptsLinkAndLoad(t *testing.T) {
	t.Parallel()
	ents, err := scriptFS.ReadDir("scripts")
	if err != nil {
		t.Fatal(err)
	}
	libTexts := []string{engine.KeyBlock(PriorityStep), engine.EndCodeBlock()}
	var scripts []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "lib_") {
			b, err := scriptFS.ReadFile("scripts/" + e.Name())
			if err != nil {
				t.Fatal(err)
			}
			libTexts = append(libTexts, string(b))
		} else if strings.HasSuffix(e.Name(), ".lua") {
			scripts = append(scripts, e.Name())
		}
	}
	if len(scripts) < 50 || len(libTexts) != len(libraries) {
		t.Fatalf("%d scripts and %d libraries in scripts/; libraries lists %d", len(scripts), len(libTexts), len(libraries))
	}
	decl := regexp.MustCompile(`(?m)^local (?:function (\w+)\(|([\w, ]+?)\s*=)`)
	libNames := map[string]bool{}
	for _, text := range libTexts {
		for _, m := range decl.FindAllStringSubmatch(text, -1) {
			for _, n := range strings.Split(m[1]+m[2], ",") {
				libNames[strings.TrimSpace(n)] = true
			}
		}
	}
	word := regexp.MustCompile(`(?:^|[^\w.:])(?:lazy\.)?([A-Za-z_]\w*)`) // a name, not a field, but lazy.name

	c := redistest.Client(t, redistest.Target{URL: redistest.SingleURL(t)})
	cx := t.Context()
	for _, name := range scripts {
		text := linker.Text(name)
		if !strings.HasSuffix(text, readScript(t, name)) {
			t.Errorf("%s: the linked text does not end with the script", name)
		}
		have := map[string]bool{}
		for _, m := range decl.FindAllStringSubmatch(text, -1) {
			for _, n := range strings.Split(m[1]+m[2], ",") {
				have[strings.TrimSpace(n)] = true
			}
		}
		for _, m := range word.FindAllStringSubmatch(stripComments(text), -1) {
			if n := m[1]; libNames[n] && !have[n] {
				t.Errorf("%s: uses the library's %s, which the linked text does not declare", name, n)
				have[n] = true // said once
			}
		}
		sha, err := c.Do(cx, c.B().ScriptLoad().Script(text).Build()).ToString()
		if err != nil {
			t.Errorf("%s: SCRIPT LOAD: %v", name, err)
			continue
		}
		if sum := sha1.Sum([]byte(text)); sha != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: SCRIPT LOAD answered %q, not the text's sha1", name, sha)
		}
	}
}

func readScript(t *testing.T, name string) string {
	t.Helper()
	b, err := scriptFS.ReadFile("scripts/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// stripComments drops Lua's "--" comments, line by line.
func stripComments(text string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if j := strings.Index(l, "--"); j >= 0 {
			lines[i] = l[:j]
		}
	}
	return strings.Join(lines, "\n")
}
