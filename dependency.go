package fleet

// The edges of flows as the tasks see them (docs/FLOWS.md): what a task
// waits for (Dependency, under a FailurePolicy), and what it knows of
// each once it ran (DependencyState). The flows' machinery is flow*.go;
// these types stand apart so that a reservation can keep what it read
// (Task.Dependencies) without reaching into it.

import (
	"encoding/json"
	"strconv"
)

// FailurePolicy says what a dependency's failure does to the task that
// waits for it (Dependency.Policy).
type FailurePolicy int

const (
	// FailDependent, the default: a dependency that is dead-lettered or
	// cancelled dead-letters the task (with ErrDependencyFailed's error),
	// which never runs; its own dependents are told in turn.
	FailDependent FailurePolicy = iota
	// IgnoreFailure: the task runs once the dependency ended, however it
	// ended; its handler can tell which dependencies failed
	// (Task.Dependencies, ResultOf).
	IgnoreFailure
)

// String names the policy: "fail" or "ignore".
func (p FailurePolicy) String() string {
	switch p {
	case FailDependent:
		return "fail"
	case IgnoreFailure:
		return "ignore"
	}
	return "FailurePolicy(" + strconv.Itoa(int(p)) + ")"
}

// code is the policy as a flow record holds it.
func (p FailurePolicy) code() string {
	if p == IgnoreFailure {
		return "i"
	}
	return "f"
}

// Dependency is one edge: the task waits for task ID of queue Queue (a task
// of the same Flow, or one that exists already), under Policy.
type Dependency struct {
	// Queue is the dependency's queue.
	Queue string
	// ID is the dependency's task id.
	ID string
	// Policy says what the dependency's failure does. Defaults to
	// FailDependent.
	Policy FailurePolicy
}

// DependencyState is what a task that waited knows of one of its
// dependencies (Task.Dependencies).
type DependencyState struct {
	// Queue and ID name the dependency. A batch's callback has one
	// dependency, the batch: Queue is empty and ID is the batch's id.
	Queue string `json:"queue"`
	ID    string `json:"id"`
	// Policy is the edge's.
	Policy FailurePolicy `json:"policy"`
	// Status is how it ended: TaskDone, TaskDead or TaskCanceled; TaskWaiting
	// while it has not (a task whose other dependency failed).
	Status TaskStatus `json:"status"`
	// Result is the dependency's result (JSON) when it succeeded: "null"
	// when it set none; a batch's status for a batch's callback.
	Result json.RawMessage `json:"result,omitempty"`
	// Error is its error when it did not succeed.
	Error string `json:"error,omitempty"`
}
