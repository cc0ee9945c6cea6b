package main

import (
	"github.com/schollz/progressbar/v3"
)

// bar is a progress bar on stderr, shown only when stderr is a terminal
// (a nil *bar draws nothing).
type bar struct{ pb *progressbar.ProgressBar }

// newBar starts a bar described as desc, or returns nil off a terminal.
func (a *app) newBar(desc string) *bar {
	if !a.tty {
		return nil
	}
	return &bar{pb: progressbar.NewOptions64(-1,
		progressbar.OptionSetWriter(a.err),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100_000_000), // 100 ms
		progressbar.OptionClearOnFinish(),
	)}
}

// set shows done of total (total <= 0: unknown), described as desc.
func (b *bar) set(desc string, done, total int64) {
	if b == nil {
		return
	}
	if total > 0 && b.pb.GetMax64() != total {
		b.pb.ChangeMax64(total)
	}
	if desc != "" {
		b.pb.Describe(desc)
	}
	_ = b.pb.Set64(done)
}

// done clears the bar.
func (b *bar) done() {
	if b != nil {
		_ = b.pb.Finish()
	}
}
