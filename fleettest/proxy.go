package fleettest

import (
	"net"
	"sync"
)

// Proxy is a TCP proxy in front of one server, for fault tests: it can cut
// every connection, freeze them (nothing passes either way, the way a
// blackholed network behaves), or hold the server's replies back while the
// client's commands still reach the server. Its methods are safe for
// concurrent use.
type Proxy struct {
	// Addr is where clients connect, "127.0.0.1:port".
	Addr string

	target string
	ln     net.Listener

	mu      sync.Mutex
	cond    *sync.Cond
	up      bool // client -> server flows
	down    bool // server -> client flows
	refuse  bool // new connections are closed at once
	closed  bool
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
	accepts int
}

// Accepts returns how many connections the proxy accepted so far.
func (p *Proxy) Accepts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepts
}

// StartProxy listens on a free port of 127.0.0.1 and forwards each
// connection to target.
func StartProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, up: true, down: true, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// URL returns redis://Addr.
func (p *Proxy) URL() string { return "redis://" + p.Addr }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed || p.refuse {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.accepts++
		p.mu.Unlock()
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = s.Close()
			return
		}
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pump(s, c, true)
		go p.pump(c, s, false)
	}
}

// pump copies src to dst, waiting at its gate (up: client to server) before
// each write. It closes both ends when either side ends.
func (p *Proxy) pump(dst, src net.Conn, toServer bool) {
	defer p.wg.Done()
	defer p.drop(dst, src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for !p.closed && !p.open(toServer) && p.alive(src) {
				p.cond.Wait()
			}
			gone := p.closed || !p.alive(src)
			p.mu.Unlock()
			if gone {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // io.EOF or a closed connection: either way, done
		}
	}
}

func (p *Proxy) open(toServer bool) bool {
	if toServer {
		return p.up
	}
	return p.down
}

func (p *Proxy) alive(c net.Conn) bool {
	_, ok := p.conns[c]
	return ok
}

func (p *Proxy) drop(a, b net.Conn) {
	p.mu.Lock()
	delete(p.conns, a)
	delete(p.conns, b)
	p.cond.Broadcast()
	p.mu.Unlock()
	_ = a.Close()
	_ = b.Close()
}

func (p *Proxy) set(up, down bool) {
	p.mu.Lock()
	p.up, p.down = up, down
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Freeze stops every byte in both directions, on current and new
// connections, until Thaw: the server and the client both see a silent
// peer, as behind a blackhole. What was read is delivered after Thaw.
func (p *Proxy) Freeze() { p.set(false, false) }

// HoldReplies lets commands reach the server but holds its replies back
// until Thaw.
func (p *Proxy) HoldReplies() { p.set(true, false) }

// Thaw lets bytes flow again both ways, delivering what was held.
func (p *Proxy) Thaw() { p.set(true, true) }

// Cut closes every current connection (bytes held are dropped); new
// connections are accepted.
func (p *Proxy) Cut() {
	p.mu.Lock()
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	clear(p.conns)
	p.cond.Broadcast()
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// Refuse makes the proxy close new connections at once (refuse true) or
// accept them again (false).
func (p *Proxy) Refuse(refuse bool) {
	p.mu.Lock()
	p.refuse = refuse
	p.mu.Unlock()
}

// Close cuts every connection, stops listening and waits for the proxy's
// goroutines to end.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
