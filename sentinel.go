package fleet

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// SentinelOptions connects through Redis Sentinel: fleet asks the
// sentinels for the master of MasterSet, sends every command there, and
// follows a failover to the replica they promote (on their +switch-master
// event, and by asking them again every SentinelRefresh).
type SentinelOptions struct {
	// MasterSet is the name the sentinels monitor the master under (the
	// name in "sentinel monitor <name> ..."). Required with Addrs.
	MasterSet string
	// Addrs lists sentinels as "host:port" (one is enough to start; list
	// them all so that Open works while some are down). Setting it turns
	// Sentinel on, and then Options.URL, Addrs and Client must be empty.
	// Defaults to none.
	Addrs []string
	// Username is the ACL user to authenticate to the sentinels as (not to
	// the master: that is Options.Username). Defaults to none.
	Username string
	// Password authenticates to the sentinels (requirepass of the
	// sentinels; the master's is Options.Password). Defaults to none.
	Password string
}

// SentinelRefresh is how often a Fleet on Sentinel asks the sentinels
// which node is the master, on top of their +switch-master events (which
// a broken connection to a sentinel can miss).
const SentinelRefresh = 2 * time.Second

// sentinel reports whether o connects through Sentinel: SentinelOptions,
// a redis-sentinel:// URL, or a redis:// URL with master_set=.
func (o *Options) sentinel() bool {
	return len(o.Sentinel.Addrs) > 0 || isSentinelURL(o.URL) || strings.Contains(o.URL, "master_set=")
}

func isSentinelURL(u string) bool {
	return strings.HasPrefix(u, "redis-sentinel://") || strings.HasPrefix(u, "rediss-sentinel://")
}

func (o *Options) validateSentinel() error {
	s := o.Sentinel
	switch {
	case len(s.Addrs) > 0 && s.MasterSet == "":
		return fmt.Errorf("%w: Sentinel.Addrs is set but Sentinel.MasterSet is empty: name the master set the sentinels monitor", ErrInvalidOptions)
	case len(s.Addrs) == 0 && s.MasterSet != "" && !isSentinelURL(o.URL):
		return fmt.Errorf("%w: Sentinel.MasterSet %q needs Sentinel.Addrs (the sentinels)", ErrInvalidOptions, s.MasterSet)
	case (s.Username != "" || s.Password != "") && !o.sentinel():
		return fmt.Errorf("%w: Sentinel.Username and Sentinel.Password need Sentinel.Addrs or a redis-sentinel:// URL", ErrInvalidOptions)
	}
	if strings.ContainsAny(s.MasterSet, " \t\r\n/") {
		return fmt.Errorf("%w: Sentinel.MasterSet %q holds white space or '/'", ErrInvalidOptions, s.MasterSet)
	}
	for _, a := range s.Addrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return fmt.Errorf("%w: Sentinel.Addrs: %q is not host:port", ErrInvalidOptions, a)
		}
	}
	return nil
}

// parseSentinelURL reads
//
//	redis-sentinel://[user:password@]host1:port1[,host2:port2...]/masterset[/db][?sentinel_username=u&sentinel_password=p]
//
// (rediss-sentinel:// for TLS to the sentinels and the master). The user
// and password in front authenticate to the master; sentinel_username and
// sentinel_password to the sentinels. A host without a port gets 26379.
func parseSentinelURL(raw string) (rueidis.ClientOption, error) {
	var co rueidis.ClientOption
	u, err := url.Parse(raw)
	if err != nil {
		return co, fmt.Errorf("%w: URL: %w", ErrInvalidOptions, err)
	}
	for h := range strings.SplitSeq(u.Host, ",") {
		if h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), "26379")
		}
		co.InitAddress = append(co.InitAddress, h)
	}
	if len(co.InitAddress) == 0 {
		return co, fmt.Errorf("%w: URL %q names no sentinel: write redis-sentinel://host:26379[,host2:26379]/masterset", ErrInvalidOptions, raw)
	}
	path := strings.Split(strings.Trim(u.Path, "/"), "/")
	if path[0] == "" || len(path) > 2 {
		return co, fmt.Errorf("%w: URL %q: the path must be /masterset or /masterset/db", ErrInvalidOptions, raw)
	}
	co.Sentinel.MasterSet = path[0]
	if len(path) == 2 {
		if co.SelectDB, err = strconv.Atoi(path[1]); err != nil || co.SelectDB < 0 {
			return co, fmt.Errorf("%w: URL %q: database %q is not a number", ErrInvalidOptions, raw, path[1])
		}
	}
	if u.User != nil {
		co.Username = u.User.Username()
		co.Password, _ = u.User.Password()
	}
	q := u.Query()
	co.Sentinel.Username = q.Get("sentinel_username")
	co.Sentinel.Password = q.Get("sentinel_password")
	co.DisableCache = q.Get("client_cache") == "0"
	if strings.HasPrefix(raw, "rediss-") {
		co.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		co.Sentinel.TLSConfig = co.TLSConfig
	}
	return co, nil
}

// applySentinel sets co up for Sentinel from o (SentinelOptions override
// what a URL said), once co holds the dial timeout.
func (o *Options) applySentinel(co *rueidis.ClientOption) {
	if len(o.Sentinel.Addrs) > 0 {
		co.InitAddress = append([]string(nil), o.Sentinel.Addrs...)
	}
	if o.Sentinel.MasterSet != "" {
		co.Sentinel.MasterSet = o.Sentinel.MasterSet
	}
	if o.Sentinel.Username != "" {
		co.Sentinel.Username = o.Sentinel.Username
	}
	if o.Sentinel.Password != "" {
		co.Sentinel.Password = o.Sentinel.Password
	}
	co.Sentinel.Dialer.Timeout = co.Dialer.Timeout
	co.Sentinel.ClientName = "fleet"
	co.Sentinel.TopologyRefreshInterval = SentinelRefresh
}

// sentinelWhere names the sentinels in a connect error.
func sentinelWhere(co rueidis.ClientOption) []string {
	return []string{"sentinels " + strings.Join(co.InitAddress, ",") + " (master set " + strconv.Quote(co.Sentinel.MasterSet) + ")"}
}
