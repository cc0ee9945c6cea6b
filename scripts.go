package fleet

import (
	"embed"

	"github.com/fleet-go/fleet/internal/engine"
	"github.com/fleet-go/fleet/internal/script"
)

// scriptFS holds the Lua scripts, one file per operation (scripts/*.lua),
// and their libraries (scripts/lib_*.lua). They stay here, not in
// internal/script, since go:embed reaches no file above its package.
//
//go:embed scripts/*.lua
var scriptFS embed.FS

// libraries are the scripts' libraries, in the order their blocks go
// before a script: a block may call the blocks of the libraries before its
// own, and those before it in its own library. The first two are made here
// from Go (engine.KeyBlock, engine.EndCodeBlock), so that their names and numbers
// are written once.
var libraries = []string{"lib_queue_keys", "lib_end_codes", "lib_time.lua", "lib_types.lua", "lib_lease.lua", "lib_pool.lua", "lib_limit.lua", "lib_flow_end.lua", "lib_queue.lua", "lib_flow.lua"}

// linker links the scripts of scripts/ with the blocks of libraries that
// they call (internal/script). Made at init: a missing file panics there.
var linker = script.NewLinker(scriptFS, "scripts", libraries, map[string]string{
	"lib_queue_keys": engine.KeyBlock(PriorityStep),
	"lib_end_codes":  engine.EndCodeBlock(),
})

// The engine's scripts are linked with the same linker.
func init() { engine.Link(linker) }

// newScript loads scripts/<name>, a script of its own, with the blocks of
// the libraries that it calls, directly or through another block: a script
// names no library, it uses what it calls (script.Linker.Text). Exec and
// ExecMulti send EVALSHA (EVALSHA_RO with script.ReadOnly) and fall back to
// EVAL on NOSCRIPT, so SCRIPT FLUSH or a restarted server never breaks a call.
func newScript(name string, opts ...script.Option) *script.Script {
	return linker.New(name, opts...)
}
