package keys

import (
	"errors"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	cases := []struct {
		kind Kind
		name string
		ok   bool
	}{
		{KindLock, "harvest:nowsecure.nl", true},
		{KindCounter, "cf-scraper:account-lock-12345", true},
		{KindKey, "b:c", true},
		{KindQueue, "cf-cookie-harvester", true},
		{KindType, "scraper", true},
		{KindLock, "ünïcödé", true},
		{KindLock, "", false},
		{KindLock, "a{b", false},
		{KindLock, "a}b", false},
		{KindLock, "a b", false},
		{KindLock, "a\tb", false},
		{KindLock, "a\u00a0b", false}, // no-break space
		{KindLock, "a\x00b", false},
		{KindLock, "a\x7fb", false},
		{KindLock, "bad\xff", false},
		{KindLock, strings.Repeat("x", MaxNameLen), true},
		{KindLock, strings.Repeat("x", MaxNameLen+1), false},
		{KindNamespace, "a:b", false},
		{KindQueue, "q:dead", false},
		{KindPool, "p:claim:x", false},
		{KindType, "a|b", false},
		{KindWorker, "host|1", false},
		{KindLock, "a|b", true},
	}
	for _, c := range cases {
		err := Check(c.kind, c.name)
		if (err == nil) != c.ok {
			t.Errorf("Check(%s, %q) = %v, want ok=%v", c.kind, c.name, err, c.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidName) {
			t.Errorf("Check(%s, %q) = %v, not ErrInvalidName", c.kind, c.name, err)
		}
	}
}

func TestLayouts(t *testing.T) {
	c, g := New("p:", false), New("p:", true)
	pairs := [][2]string{
		{c.Lock("a:b"), "p:fleet:lock:a:b"},
		{g.Lock("a:b"), "p:fleet:lock:{a:b}"},
		{g.LockFence("a:b"), "p:fleet:fence:{a:b}"},
		{c.LockTomb("a:b"), "p:fleet:locktomb:a:b"},
		{g.LockTomb("a:b"), "p:fleet:locktomb:{a:b}"},
		{c.KV("ns", "k:1"), "p:fleet:kv:ns:k:1"},
		{g.KV("ns", "k:1"), "p:fleet:kv:ns:k:1"},
		{c.Queue("q").Processing, "p:fleet:queue:q:processing"},
		{g.Queue("q").Body, "p:fleet:queue:{q}:processing:body"},
		{c.PoolClaim("cf", "i1"), "p:fleet:pool:cf:claim:i1"},
		{g.PoolClaim("cf", "i1"), "p:fleet:pool:{cf}:claim:i1"},
		{c.Worker("scraper", "host1").State, "p:wkr:scraper:host1:state"},
		{g.Worker("scraper", "host1").Hardware, "p:wkr:{scraper:host1}:hardware"},
		{g.Workers("scraper"), "p:wkrs:scraper"},
		{g.AllWorkers(), "p:wkrs:all"},
		{g.Stream("scraper"), "p:stream:scraper"},
		{g.Catalog(), "p:fleet:catalog"},
		{c.Limit("example.org"), "p:fleet:limit:example.org"},
		{g.Limit("example.org"), "p:fleet:limit:{example.org}"},
		{c.Sem("acct:1"), "p:fleet:sem:acct:1"},
		{g.Sem("acct:1"), "p:fleet:sem:{acct:1}"},
		{c.SemTomb("acct:1"), "p:fleet:semtomb:acct:1"},
		{g.SemTomb("acct:1"), "p:fleet:semtomb:{acct:1}"},
		{g.Event("scraper.emit"), "p:event:scraper.emit"},
	}
	for _, p := range pairs {
		if p[0] != p[1] {
			t.Errorf("got %q, want %q", p[0], p[1])
		}
	}
}
