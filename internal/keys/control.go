package keys

// CancelTopic is the event topic fleet:cancel:<queue> (pub/sub channel
// event:fleet:cancel:<queue>; carries a task id as JSON): Queue.Cancel
// publishes there the id of a running task, and every batch worker of the
// queue listens.
func (k Keys) CancelTopic(queue string) string { return "fleet:cancel:" + queue }
