// Package bench holds comparison programs that measure fleet against peer
// libraries on the same redis-server in one run. It is a module of its own so
// that the library never depends on its peers. Each program lives in cmd/.
package bench
