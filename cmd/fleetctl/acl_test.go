package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// acl prints a line that a server takes, and whose user works under its
// prefix alone; bad input is a usage error. It needs no Redis URL.
func TestFleetctlACL(t *testing.T) {
	tg := redistest.Targets(t)[0]
	raw := redistest.Client(t, tg)
	prefix := redistest.Prefix(t, tg)
	user := "fleetctl-acl-" + strings.TrimSuffix(prefix, ":")
	out, errOut, code := fctl(t, "acl", prefix, "--role", "submitter", "--user", user)
	want := "ACL SETUSER " + user + " on resetkeys resetchannels -@all "
	if code != 0 || !strings.HasPrefix(out, want) || !strings.Contains(out, " ~"+prefix+"fleet:queue:* ") ||
		!strings.HasSuffix(out, " %R~"+prefix+"* &"+prefix+"*\n") || strings.Count(out, "\n") != 1 || !strings.Contains(errOut, "password") {
		t.Fatalf("acl: exit %d\n%s\n%s", code, out, errOut)
	}
	// The line, with a password, makes a user that submits under prefix
	// and nothing outside it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	words := append(strings.Fields(out)[1:], ">pw")
	if err := raw.Do(ctx, raw.B().Arbitrary("ACL").Args(words...).Build()).Error(); err != nil {
		t.Fatalf("ACL %v: %v", words, err)
	}
	t.Cleanup(func() {
		_ = raw.Do(context.Background(), raw.B().Arbitrary("ACL", "DELUSER").Args(user).Build()).Error()
	})
	f, err := fleet.Open(ctx, fleet.Options{URL: tg.URL, Username: user, Password: "pw", Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := fleet.NewQueue[int](f, "q", fleet.QueueOptions{}).Submit(ctx, 1); err != nil {
		t.Fatalf("submit as the printed user: %v", err)
	}
	if err := f.KV("ns").Set(ctx, "k", "v", 0); !errors.Is(err, fleet.ErrAuth) {
		t.Fatalf("KV set as a submitter: %v, want ErrAuth", err)
	}
	if _, err := fleet.Open(ctx, fleet.Options{URL: tg.URL, Username: user, Password: "pw", Prefix: "other:"}); !errors.Is(err, fleet.ErrAuth) {
		t.Fatalf("open outside the prefix: %v, want ErrAuth", err)
	}

	// --json, the default role and user.
	out, _, code = fctl(t, "acl", "--json", "t1:")
	if code != 0 || !strings.Contains(out, `"user": "t1-worker"`) || !strings.Contains(out, `"command": "ACL SETUSER t1-worker on resetkeys`) {
		t.Fatalf("acl --json: exit %d\n%s", code, out)
	}
	for _, bad := range [][]string{{"acl"}, {"acl", "t*"}, {"acl", "t1:", "--role", "admin"}, {"acl", "a:", "b:"}} {
		if _, errOut, code := fctl(t, bad...); code != 2 {
			t.Errorf("%v: exit %d, want 2: %s", bad, code, errOut)
		}
	}
}
