// Package script links fleet's Lua scripts with the blocks of their
// libraries. A script names no library: it calls functions (and reads
// locals) that the libraries' blocks declare, and the Linker puts before
// it the blocks that it uses, directly or through another block, in the
// libraries' order. Some blocks are text made by the caller (generated
// from Go, so that names and numbers are written once); the rest are read
// from a file system, where the root package embeds scripts/*.lua.
package script

import (
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Option is an option of Linker.New.
type Option int

const (
	// ReadOnly sends the script with EVALSHA_RO: it only reads, so a
	// replica may serve it and rueidis may send it again.
	ReadOnly Option = iota + 1
	// Retryable lets rueidis send the script again after a connection
	// broke: running it twice does what running it once does.
	Retryable
)

// Linker links scripts with the blocks of their libraries. Its blocks are
// parsed once, by NewLinker; Text and New only read them, so a Linker may
// be used from many goroutines.
type Linker struct {
	fsys   fs.FS
	dir    string
	blocks []block // the blocks of every library, in the libraries' order
}

// block is one block of a library: a comment and what it declares (a
// local function, or locals), separated from the next by a blank line.
type block struct {
	names []string
	text  string
}

// libDecl finds the names a block declares.
var libDecl = regexp.MustCompile(`(?m)^local (?:function ([A-Za-z_][A-Za-z0-9_]*)\(|([A-Za-z_][A-Za-z0-9_, ]*?)\s*(?:=|$))`)

// NewLinker returns a Linker of the scripts in directory dir of fsys.
// libraries are the scripts' libraries, in the order their blocks go
// before a script: a block may call the blocks of the libraries before its
// own, and those before it in its own library. A library is the text
// generated[name] when generated holds its name, else the file dir/name.
//
// A script or library that is not there is a defect of the build, never
// input: NewLinker, Text and New panic with "fleet: missing embedded
// script NAME".
func NewLinker(fsys fs.FS, dir string, libraries []string, generated map[string]string) *Linker {
	l := &Linker{fsys: fsys, dir: dir}
	for _, lib := range libraries {
		text, ok := generated[lib]
		if !ok {
			text = l.read(lib)
		}
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
				l.blocks = append(l.blocks, block{names: names, text: b})
			}
		}
	}
	return l
}

// New returns the script name, linked (Text), as a Script: its Exec and
// ExecMulti send EVALSHA (EVALSHA_RO with ReadOnly) and fall back to EVAL
// on NOSCRIPT, so SCRIPT FLUSH or a restarted server never breaks a call.
func (l *Linker) New(name string, opts ...Option) *Script {
	return newScript(l.Text(name), slices.Contains(opts, ReadOnly), slices.Contains(opts, Retryable))
}

// Text returns the script name after the library blocks it calls, with
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
func (l *Linker) Text(name string) string {
	script := l.read(name)
	body := withoutComments(script)
	eager := l.closureInto(make([]bool, len(l.blocks)), nil, body)
	lazy := make([]bool, len(l.blocks))
	var lazyNames []string
	for grown := true; grown; {
		grown = false
		texts := []string{body}
		for i, b := range l.blocks {
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
				for i, b := range l.blocks {
					if !eager[i] && !lazy[i] && slices.Contains(b.names, n) {
						lazy[i] = true
						l.closureInto(lazy, eager, withoutComments(b.text))
					}
				}
			}
		}
	}
	var sb strings.Builder
	if len(lazyNames) > 0 {
		// The text Redis has always been sent: it names the linker as it
		// was when it lived in the root's scripts.go.
		sb.WriteString("-- lazy holds the blocks that only some runs call, made at the first use\n-- of one (scripts.go: linked).\nlocal lazy = {}\n\n")
	}
	l.writeBlocks(&sb, eager)
	if len(lazyNames) > 0 {
		sb.WriteString("setmetatable(lazy, {__index = function(t, k)\n")
		l.writeBlocks(&sb, lazy)
		slices.Sort(lazyNames)
		for _, n := range lazyNames {
			sb.WriteString("rawset(t, '" + n + "', " + n + ")\n")
		}
		sb.WriteString("setmetatable(t, nil)\nreturn rawget(t, k)\nend})\n\n")
	}
	sb.WriteString(script)
	return sb.String()
}

// writeBlocks writes the blocks marked in which, in the libraries' order,
// each followed by a blank line.
func (l *Linker) writeBlocks(sb *strings.Builder, which []bool) {
	for i, b := range l.blocks {
		if which[i] {
			sb.WriteString(b.text)
			sb.WriteString("\n\n")
		}
	}
}

// closureInto marks in used the blocks that Lua text calls, and those
// that they call, leaving out the blocks marked in skip (nil: none); it
// returns used.
func (l *Linker) closureInto(used, skip []bool, text string) []bool {
	for scan := []string{text}; len(scan) > 0; {
		t := scan[len(scan)-1]
		scan = scan[:len(scan)-1]
		for i, b := range l.blocks {
			if !used[i] && (skip == nil || !skip[i]) && refersTo(t, b.names) {
				used[i] = true
				scan = append(scan, withoutComments(b.text))
			}
		}
	}
	return used
}

// read returns the file name of the Linker's directory. A file that is not
// there is a defect of the build (the files are embedded), never input:
// read panics, and is the one place that does.
func (l *Linker) read(name string) string {
	b, err := fs.ReadFile(l.fsys, path.Join(l.dir, name))
	if err != nil {
		panic("fleet: missing embedded script " + name) // a build defect, never input
	}
	return string(b)
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
