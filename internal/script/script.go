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
	sha, text string
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
	return &Script{Lua: l, sha: hex.EncodeToString(sum[:]), text: text, readOnly: readOnly, retryable: retryable}
}

// SHA1 is the script's SHA1, as EVALSHA names it.
func (s *Script) SHA1() string { return s.sha }

// ExecMulti runs the script once for each of multi, in one pipeline of
// EVALSHA (EVALSHA_RO for a read-only script), each routed by its keys'
// slot. Runs that a server answered NOSCRIPT (a node that restarted, or
// that never ran the script) did not run, and go again in rounds while
// ctx lasts, each one pipeline: the first of them by EVAL with the
// script's text, which teaches its node the script, and the rest by
// EVALSHA after it, which run where their node knows the script by then
// (a node runs a pipeline's commands in order) and are answered NOSCRIPT
// again for the next round elsewhere. Each round teaches a node, so after
// a restart a call takes a round trip more per node that lacked the
// script, not one per run. A run still unrun when ctx ends gets ctx's
// error. The results are in multi's order. A single run goes by Exec
// alone (EVALSHA, then EVAL on NOSCRIPT).
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
	all := make([]int, len(multi))
	for i := range all {
		all[i] = i
	}
	res := make([]rueidis.RedisResult, len(multi))
	missing := s.send(ctx, c, multi, all, false, res)
	for len(missing) > 0 && ctx.Err() == nil {
		missing = s.send(ctx, c, multi, missing, true, res)
	}
	for _, i := range missing { // ctx ended: these did not run, as Exec would say
		res[i] = rueidis.NewErrorResult(ctx.Err())
	}
	return res
}

// send runs multi's runs at the indexes which in one pipeline, the first
// by EVAL with the script's text when teach is set and the others by
// EVALSHA, writes their results to res, and returns the indexes answered
// NOSCRIPT.
func (s *Script) send(ctx context.Context, c rueidis.Client, multi []rueidis.LuaExec, which []int, teach bool, res []rueidis.RedisResult) (missing []int) {
	cmds := make(rueidis.Commands, len(which))
	for j, i := range which {
		m := multi[i]
		switch {
		case teach && j == 0 && s.readOnly:
			cmds[j] = c.B().EvalRo().Script(s.text).Numkeys(int64(len(m.Keys))).Key(m.Keys...).Arg(m.Args...).Build()
		case teach && j == 0:
			cmds[j] = c.B().Eval().Script(s.text).Numkeys(int64(len(m.Keys))).Key(m.Keys...).Arg(m.Args...).Build()
		case s.readOnly:
			cmds[j] = c.B().EvalshaRo().Sha1(s.sha).Numkeys(int64(len(m.Keys))).Key(m.Keys...).Arg(m.Args...).Build()
		default:
			cmds[j] = c.B().Evalsha().Sha1(s.sha).Numkeys(int64(len(m.Keys))).Key(m.Keys...).Arg(m.Args...).Build()
		}
		if s.retryable && !s.readOnly {
			cmds[j] = cmds[j].ToRetryable()
		}
	}
	for j, r := range c.DoMulti(ctx, cmds...) {
		res[which[j]] = r
		if e, ok := rueidis.IsRedisErr(r.Error()); ok && e.IsNoScript() {
			missing = append(missing, which[j])
		}
	}
	return missing
}
