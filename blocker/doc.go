// Package blocker waits until enough endpoints of a service are addressable
// (resolve in Consul DNS) or functional (also pass health and accept TCP).
//
// It is the service-blocker command (Run) and the library under it: a
// Resolver that asks Consul DNS for SRV records over TCP (Consul trims UDP
// answers to 3 records, silently by default), and a Blocker that polls every
// requirement with capped exponential backoff until all are met, the
// timeout passes, or its context ends. Nothing is cached: every poll is a
// fresh query.
//
// Exit codes of Run: 0 all met; 1 timed out (or interrupted), naming each
// service still short; 2 usage error; 3 the DNS server never gave a usable
// answer (NOERROR or NXDOMAIN) for the whole timeout.
package blocker
