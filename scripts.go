package fleet

import (
	"embed"
	"regexp"
	"strings"

	"github.com/redis/rueidis"
)

// scriptFS holds the Lua scripts, one file per operation (scripts/*.lua).
//
//go:embed scripts/*.lua
var scriptFS embed.FS

// script loads an embedded script, with the helpers it calls (withLib).
// Exec sends EVALSHA and falls back to EVAL on NOSCRIPT, so SCRIPT FLUSH or
// a restarted server never breaks a call.
func script(name string) *rueidis.Lua {
	return rueidis.NewLuaScript(withLib(name))
}

// withLib is an embedded script with the helpers it calls before it:
// lib_types.lua when it checks key types, and, for a queue script, the
// functions of lib_queue.lua that it calls, directly or through another
// helper. Every helper costs a closure (and its garbage) on every run of
// the script, so only those in use go.
func withLib(name string) string {
	body := mustRead(name)
	lib := ""
	if strings.Contains(body, "wrong_types(") {
		lib += mustRead("lib_types.lua") + "\n"
	}
	if strings.HasPrefix(name, "queue_") || strings.HasPrefix(name, "sync_queue_") {
		lib += helpersFor(mustRead("lib_queue.lua"), body)
	}
	return lib + body
}

// libFunc finds the name of the local function a helper block defines.
var libFunc = regexp.MustCompile(`(?m)^local function ([A-Za-z_][A-Za-z0-9_]*)\(`)

// helpersFor returns the blocks of lib (blank-line separated: a comment and
// one local function) that body calls, with the blocks those call, in
// lib's order, which defines a helper before its callers.
func helpersFor(lib, body string) string {
	type block struct {
		name, text string
		used       bool
	}
	var blocks []*block
	for _, text := range strings.Split(lib, "\n\n") {
		if m := libFunc.FindStringSubmatch(text); m != nil {
			blocks = append(blocks, &block{name: m[1], text: text})
		}
	}
	for scan := []string{body}; len(scan) > 0; {
		text := scan[len(scan)-1]
		scan = scan[:len(scan)-1]
		for _, b := range blocks {
			if !b.used && regexp.MustCompile(`(^|[^A-Za-z0-9_.:])`+b.name+`\(`).MatchString(text) {
				b.used = true
				scan = append(scan, b.text)
			}
		}
	}
	var sb strings.Builder
	for _, b := range blocks {
		if b.used {
			sb.WriteString(b.text)
			sb.WriteString("\n\n")
		}
	}
	return sb.String()
}

// readOnlyScript loads an embedded script that only reads (EVALSHA_RO).
func readOnlyScript(name string) *rueidis.Lua {
	return rueidis.NewLuaScriptReadOnly(withLib(name))
}

func mustRead(name string) string {
	b, err := scriptFS.ReadFile("scripts/" + name)
	if err != nil {
		panic("fleet: missing embedded script " + name) // a build defect, never input
	}
	return string(b)
}
