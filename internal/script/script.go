package script

import (
	"context"
	"crypto/sha1"
	"encoding/hex"

	"github.com/redis/rueidis"
)

// Script is a linked script's handle: rueidis's Lua, whose Exec it keeps
// (EVALSHA, then EVAL when the server answers NOSCRIPT), with an
// ExecMulti of its own and the script's SHA1.
type Script struct {
	*rueidis.Lua
	sha       string
	readOnly  bool
	retryable bool
}

func newScript(text string, readOnly, retryable bool) *Script {
	var l *rueidis.Lua
	switch {
	case readOnly:
		l = rueidis.NewLuaScriptReadOnly(text)
	case retryable:
		l = rueidis.NewLuaScriptRetryable(text)
	default:
		l = rueidis.NewLuaScript(text)
	}
	sum := sha1.Sum([]byte(text))
	return &Script{Lua: l, sha: hex.EncodeToString(sum[:]), readOnly: readOnly, retryable: retryable}
}

// SHA1 is the script's SHA1, as EVALSHA names it.
func (s *Script) SHA1() string { return s.sha }

// ExecMulti runs the script once for each of multi, in one pipeline of
// EVALSHA (EVALSHA_RO for a read-only script), each routed by its keys'
// slot; a run that the server answered NOSCRIPT (a node that restarted,
// or that never ran the script) did not run, and runs again through Exec
// (EVALSHA, then EVAL with the script's text where the node still lacks
// it, which teaches it the script: once per node), while ctx lasts. The
// results are in multi's order. A single run goes by Exec alone.
//
// rueidis's own Lua.ExecMulti first sends SCRIPT LOAD to every node the
// client knows, a round trip (and, on a cluster, a call to each node) more
// on every call.
func (s *Script) ExecMulti(ctx context.Context, c rueidis.Client, multi ...rueidis.LuaExec) []rueidis.RedisResult {
	switch len(multi) {
	case 0:
		return nil
	case 1:
		return []rueidis.RedisResult{s.Exec(ctx, c, multi[0].Keys, multi[0].Args)}
	}
	cmds := make(rueidis.Commands, len(multi))
	for i, m := range multi {
		if s.readOnly {
			cmds[i] = c.B().EvalshaRo().Sha1(s.sha).Numkeys(int64(len(m.Keys))).Key(m.Keys...).Arg(m.Args...).Build()
			continue
		}
		cmds[i] = c.B().Evalsha().Sha1(s.sha).Numkeys(int64(len(m.Keys))).Key(m.Keys...).Arg(m.Args...).Build()
		if s.retryable {
			cmds[i] = cmds[i].ToRetryable()
		}
	}
	res := c.DoMulti(ctx, cmds...)
	for i, r := range res {
		if e, ok := rueidis.IsRedisErr(r.Error()); ok && e.IsNoScript() {
			res[i] = s.Exec(ctx, c, multi[i].Keys, multi[i].Args)
		}
	}
	return res
}
