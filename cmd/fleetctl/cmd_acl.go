package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"unicode"

	"github.com/fleet-go/fleet"
)

func init() {
	var role, user string
	register(&command{
		name:    "acl",
		args:    "<prefix>",
		summary: "print the ACL SETUSER line that fences a Redis user to one tenant's prefix (run it on every node; add >password); needs no Redis",
		offline: true,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&role, "role", string(fleet.ACLWorker), "what the user does: worker, submitter, operator or reader")
			fs.StringVar(&user, "user", "", "the ACL user's name (defaults to <prefix without ':'>-<role>)")
		},
		run: func(ctx context.Context, a *app, args []string) int {
			prefix := a.prefix
			switch {
			case len(args) == 1:
				prefix = args[0]
			case len(args) > 1:
				return a.usageErr("acl", "takes one prefix")
			case prefix == "":
				return a.usageErr("acl", "needs a prefix")
			}
			rules, err := fleet.ACLRules(prefix, fleet.ACLRole(role))
			if err != nil {
				return a.fail(err)
			}
			name := user
			if name == "" {
				name = strings.TrimRight(prefix, ":") + "-" + role
			}
			if name == "" || strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
				return a.usageErr("acl", "user %q is empty or holds white space", name)
			}
			words := append([]string{"ACL", "SETUSER", name, "on"}, rules...)
			for i, w := range words {
				words[i] = cliQuote(w)
			}
			line := strings.Join(words, " ")
			if a.json {
				a.emit(struct {
					User    string   `json:"user"`
					Role    string   `json:"role"`
					Prefix  string   `json:"prefix"`
					Rules   []string `json:"rules"`
					Command string   `json:"command"`
				}{name, role, prefix, rules, line}, nil)
				return exitOK
			}
			fmt.Fprintln(a.out, line)
			fmt.Fprintf(a.err, "fleetctl acl: the user has no password yet: add >password to the line, and run it on every node of a cluster (docs/ACL.md)\n")
			return exitOK
		},
	})
}

// cliQuote quotes w for redis-cli when it holds a quote or a backslash
// (ACL rules never hold white space: fleet refuses such a prefix).
func cliQuote(w string) string {
	if !strings.ContainsAny(w, `"'\`) {
		return w
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(w) + `"`
}
