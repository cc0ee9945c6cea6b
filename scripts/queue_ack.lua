-- queue_ack: ack the tasks the caller holds, and take nothing: the acks of
-- queue_reserve.lua (ack_all in lib_queue.lua, the one ack step) without
-- the take, so that a lone Task.Ack costs no more than its own commands.
-- KEYS[1..8] the queue's keys (PENDING ... POLICY: queue_core.go)
-- KEYS[9..]  the unique key and the result key of each ack that keeps
--            something (see ack_all)
-- ARGV       how many plain acks, then the plain acks as triples, then the
--            acks that keep something as 7-tuples (ack_all)
-- returns    a code per ack, in order: DONE, or LOST when the lease was lost
return ack_all(1, 9)
