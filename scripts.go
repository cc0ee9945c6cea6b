package fleet

import (
	"embed"
	"regexp"
	"slices"
	"strings"

	"github.com/redis/rueidis"
)

// scriptFS holds the Lua scripts, one file per operation (scripts/*.lua),
// and their libraries (scripts/lib_*.lua).
//
//go:embed scripts/*.lua
var scriptFS embed.FS

// scriptOpt is an option of newScript.
type scriptOpt int

const (
	// readOnly sends the script with EVALSHA_RO: it only reads, so a
	// replica may serve it and rueidis may send it again.
	readOnly scriptOpt = iota + 1
	// retryable lets rueidis send the script again after a connection
	// broke: running it twice does what running it once does.
	retryable
)

// libraries are the scripts' libraries, in the order their blocks go
// before a script: a block may call the blocks of the libraries before its
// own, and those before it in its own library. The first two are made here
// from Go (queueKeyBlock, endCodeBlock), so that their names and numbers
// are written once.
var libraries = []string{"lib_queue_keys", "lib_end_codes", "lib_time.lua", "lib_types.lua", "lib_lease.lua", "lib_pool.lua", "lib_limit.lua", "lib_flow_end.lua", "lib_queue.lua", "lib_flow.lua"}

// newScript loads scripts/<name>, a script of its own, with the blocks of
// the libraries that it calls, directly or through another block (linked):
// a script names no library, it uses what it calls. Exec sends EVALSHA
// (EVALSHA_RO with readOnly) and falls back to EVAL on NOSCRIPT, so SCRIPT
// FLUSH or a restarted server never breaks a call.
func newScript(name string, opts ...scriptOpt) *rueidis.Lua {
	text := linked(name)
	switch {
	case slices.Contains(opts, readOnly):
		return rueidis.NewLuaScriptReadOnly(text)
	case slices.Contains(opts, retryable):
		return rueidis.NewLuaScriptRetryable(text)
	}
	return rueidis.NewLuaScript(text)
}

// libBlock is one block of a library: a comment and what it declares (a
// local function, or locals), separated from the next by a blank line.
type libBlock struct {
	names []string
	text  string
}

// libDecl finds the names a block declares.
var libDecl = regexp.MustCompile(`(?m)^local (?:function ([A-Za-z_][A-Za-z0-9_]*)\(|([A-Za-z_][A-Za-z0-9_, ]*?)\s*(?:=|$))`)

// blocks are the blocks of every library, in libraries' order.
var blocks = func() []libBlock {
	var out []libBlock
	for _, lib := range libraries {
		text := libText(lib)
		for _, b := range strings.Split(text, "\n\n") {
			var names []string
			for _, m := range libDecl.FindAllStringSubmatch(b, -1) {
				if m[1] != "" {
					names = append(names, m[1])
					continue
				}
				for _, n := range strings.Split(m[2], ",") {
					names = append(names, strings.TrimSpace(n))
				}
			}
			if len(names) > 0 {
				out = append(out, libBlock{names: names, text: b})
			}
		}
	}
	return out
}()

func libText(lib string) string {
	switch lib {
	case "lib_queue_keys":
		return queueKeyBlock()
	case "lib_end_codes":
		return endCodeBlock()
	}
	return mustRead(lib)
}

// linked returns scripts/<name> after the library blocks it calls, with
// those that they call, in the libraries' order (which declares a name
// before its users). Every block costs a closure (and its garbage) on
// every run of a script, so only those in use go.
//
// A call written lazy.<name> (in the script or a block) makes name's block
// lazy in that script, with the blocks only it calls: they are made inside
// the table lazy's __index, at the first use of any of them in a run, so
// that a run which takes the common path (a queue without groups, an ack
// of tasks that hold no permit) makes none of them. The lazy blocks see
// every eager one, which are all made before them.
func linked(name string) string {
	body := withoutComments(mustRead(name))
	eager := closureInto(make([]bool, len(blocks)), nil, body)
	lazy := make([]bool, len(blocks))
	var lazyNames []string
	for grown := true; grown; {
		grown = false
		texts := []string{body}
		for i, b := range blocks {
			if eager[i] || lazy[i] {
				texts = append(texts, withoutComments(b.text))
			}
		}
		for _, t := range texts {
			for _, n := range lazyRefs(t) {
				if slices.Contains(lazyNames, n) {
					continue
				}
				lazyNames, grown = append(lazyNames, n), true
				for i, b := range blocks {
					if !eager[i] && !lazy[i] && slices.Contains(b.names, n) {
						lazy[i] = true
						closureInto(lazy, eager, withoutComments(b.text))
					}
				}
			}
		}
	}
	var sb strings.Builder
	if len(lazyNames) > 0 {
		sb.WriteString("-- lazy holds the blocks that only some runs call, made at the first use\n-- of one (scripts.go: linked).\nlocal lazy = {}\n\n")
	}
	for i, b := range blocks {
		if eager[i] {
			sb.WriteString(b.text)
			sb.WriteString("\n\n")
		}
	}
	if len(lazyNames) > 0 {
		sb.WriteString("setmetatable(lazy, {__index = function(t, k)\n")
		for i, b := range blocks {
			if lazy[i] {
				sb.WriteString(b.text)
				sb.WriteString("\n\n")
			}
		}
		slices.Sort(lazyNames)
		for _, n := range lazyNames {
			sb.WriteString("rawset(t, '" + n + "', " + n + ")\n")
		}
		sb.WriteString("setmetatable(t, nil)\nreturn rawget(t, k)\nend})\n\n")
	}
	sb.WriteString(mustRead(name))
	return sb.String()
}

// closureInto marks in used the blocks that Lua text calls, and those
// that they call, leaving out the blocks marked in skip (nil: none); it
// returns used.
func closureInto(used, skip []bool, text string) []bool {
	for scan := []string{text}; len(scan) > 0; {
		t := scan[len(scan)-1]
		scan = scan[:len(scan)-1]
		for i, b := range blocks {
			if !used[i] && (skip == nil || !skip[i]) && refersTo(t, b.names) {
				used[i] = true
				scan = append(scan, withoutComments(b.text))
			}
		}
	}
	return used
}

// lazyRef finds the lazy.<name> uses of Lua text.
var lazyRef = regexp.MustCompile(`(?:^|[^A-Za-z0-9_.:])lazy\.([A-Za-z_][A-Za-z0-9_]*)`)

// lazyRefs returns the names that Lua text uses as lazy.<name>.
func lazyRefs(text string) []string {
	var out []string
	for _, m := range lazyRef.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// refersTo reports whether Lua text uses one of names: as a word of its
// own, not a field (t.name, t:name) nor part of a longer name.
func refersTo(text string, names []string) bool {
	for _, n := range names {
		for i := 0; ; {
			j := strings.Index(text[i:], n)
			if j < 0 {
				break
			}
			at := i + j
			end := at + len(n)
			before := at == 0 || !isLuaWord(text[at-1]) && text[at-1] != '.' && text[at-1] != ':'
			after := end == len(text) || !isLuaWord(text[end])
			if before && after {
				return true
			}
			i = end
		}
	}
	return false
}

// withoutComments is Lua text without its "--" comments, so that a name
// a comment mentions links nothing in.
func withoutComments(text string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if j := strings.Index(l, "--"); j >= 0 {
			lines[i] = l[:j]
		}
	}
	return strings.Join(lines, "\n")
}

func isLuaWord(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func mustRead(name string) string {
	b, err := scriptFS.ReadFile("scripts/" + name)
	if err != nil {
		panic("fleet: missing embedded script " + name) // a build defect, never input
	}
	return string(b)
}
