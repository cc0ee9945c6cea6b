package fleet

import (
	"embed"
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
// lib_types.lua when it checks key types, lib_queue.lua for a queue
// script. (A helper costs a closure on every run: only those in use go.)
func withLib(name string) string {
	body := mustRead(name)
	lib := ""
	if strings.Contains(body, "wrong_types(") {
		lib += mustRead("lib_types.lua") + "\n"
	}
	if strings.HasPrefix(name, "queue_") || strings.HasPrefix(name, "sync_queue_") {
		lib += mustRead("lib_queue.lua") + "\n"
	}
	return lib + body
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
