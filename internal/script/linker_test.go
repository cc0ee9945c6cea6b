package script

import (
	"strings"
	"testing"
	"testing/fstest"
)

// The blocks of the test's libraries, each as it stands in its file: the
// last of a file keeps the file's last newline.
const (
	headA   = "-- lib_a: a header, which declares nothing and never goes."
	blkOne  = "-- one adds one.\nlocal function one(x)\n  return x + 1\nend"
	blkTwo  = "-- two calls one (and mentions three, in a comment).\nlocal function two(x)\n  return one(one(x))\nend"
	blkIdle = "-- idle is called by none.\nlocal function idle()\n  return 0\nend\n"
	blkThr  = "-- three calls two.\nlocal function three(x)\n  return two(x) + 1\nend"
	blkName = "local function name()\n  return 'n'\nend"
	blkKV   = "-- K and V are locals.\nlocal K, V = 1, 2\n"
	blkGen  = "-- GEN is made by the caller.\nlocal GEN = 7"
)

func testLinker(t *testing.T, scripts map[string]string) *Linker {
	t.Helper()
	fsys := fstest.MapFS{
		"lua/lib_a.lua": {Data: []byte(strings.Join([]string{headA, blkOne, blkTwo, blkIdle}, "\n\n"))},
		"lua/lib_b.lua": {Data: []byte(strings.Join([]string{blkThr, blkName, blkKV}, "\n\n"))},
	}
	for name, text := range scripts {
		fsys["lua/"+name] = &fstest.MapFile{Data: []byte(text)}
	}
	// lib_gen is no file: the linker must take the caller's text.
	return NewLinker(fsys, "lua", []string{"lib_gen", "lib_a.lua", "lib_b.lua"}, map[string]string{"lib_gen": blkGen})
}

// blocks is the linked text of eager blocks: each, then a blank line.
func blocks(bs ...string) string {
	var sb strings.Builder
	for _, b := range bs {
		sb.WriteString(b + "\n\n")
	}
	return sb.String()
}

func TestText(t *testing.T) {
	const lazyHead = "-- lazy holds the blocks that only some runs call, made at the first use\n-- of one (scripts.go: linked).\nlocal lazy = {}\n\n"
	for _, tc := range []struct {
		name, script, want string
	}{{
		// three calls two, which calls one: the three go, in the
		// libraries' order; idle, name, K, V and GEN do not.
		name:   "calls three",
		script: "return three(1)\n",
		want:   blocks(blkOne, blkTwo, blkThr),
	}, {
		name:   "calls two",
		script: "return two(1)\n",
		want:   blocks(blkOne, blkTwo),
	}, {
		name:   "a comment links nothing",
		script: "-- three(1), name() and K would link their blocks here.\nreturn 1 -- two(1)\n",
		want:   "",
	}, {
		name:   "a field or a longer name links nothing",
		script: "local t = {}\nt.name = t:three() + t.one\nlocal my_name, name2 = 1, 2\nreturn t.K\n",
		want:   "",
	}, {
		// one is eager (called as itself); three is lazy, with two,
		// which only it calls; idle, name and the rest do not go.
		name:   "lazy",
		script: "if ARGV[1] == 'x' then\n  return lazy.three(1)\nend\nreturn one(K)\n",
		want: lazyHead + blocks(blkOne, blkKV) +
			"setmetatable(lazy, {__index = function(t, k)\n" + blocks(blkTwo, blkThr) +
			"rawset(t, 'three', three)\nsetmetatable(t, nil)\nreturn rawget(t, k)\nend})\n\n",
	}, {
		name:   "lazy in a comment",
		script: "-- lazy.three(1)\nreturn 1\n",
		want:   "",
	}, {
		name:   "generated",
		script: "return GEN + V\n",
		want:   blocks(blkGen, blkKV),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			l := testLinker(t, map[string]string{"s.lua": tc.script})
			if got, want := l.Text("s.lua"), tc.want+tc.script; got != want {
				t.Errorf("linked text:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestMissingPanics(t *testing.T) {
	panics := func(what string, f func()) {
		t.Helper()
		defer func() {
			t.Helper()
			if r := recover(); r != what {
				t.Errorf("panic %v, want %q", r, what)
			}
		}()
		f()
	}
	l := testLinker(t, nil)
	panics("fleet: missing embedded script nope.lua", func() { l.Text("nope.lua") })
	panics("fleet: missing embedded script nope.lua", func() { l.New("nope.lua", ReadOnly) })
	panics("fleet: missing embedded script lib_gen", func() {
		NewLinker(fstest.MapFS{}, "lua", []string{"lib_gen"}, nil)
	})
}

func TestNew(t *testing.T) {
	l := testLinker(t, map[string]string{"s.lua": "return two(1)\n"})
	for _, opts := range [][]Option{nil, {ReadOnly}, {Retryable}} {
		if l.New("s.lua", opts...) == nil {
			t.Fatalf("New with %v: nil", opts)
		}
	}
}
