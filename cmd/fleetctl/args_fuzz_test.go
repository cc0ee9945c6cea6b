package main

import (
	"io"
	"strings"
	"testing"
)

// FuzzArgs: any command line (arguments separated by NUL) is parsed
// without a panic into a known command with its flags, or stops with a
// usage exit code; parsing connects to nothing.
func FuzzArgs(f *testing.F) {
	for _, s := range []string{"queues", "queues\x00--json", "--url\x00redis://h:1\x00dlq\x00list\x00jobs\x00--json",
		"task\x00get\x00q\x00id", "config\x00set\x00t\x00--gen\x00x", "nosuch", "--bogus", "dlq\x00list\x00--", "help", "-h", "migrate\x00--dry-run\x00--to"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Split(line, "\x00")
		_, cmd, fs, code, ok := parse(args, io.Discard, io.Discard, false)
		if ok {
			if cmd == nil || fs == nil || !fs.Parsed() {
				t.Fatalf("%q: ok without a parsed command", args)
			}
			return
		}
		if code != exitOK && code != exitUsage {
			t.Fatalf("%q: exit code %d", args, code)
		}
	})
}
