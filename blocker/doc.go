// Package blocker waits until enough endpoints of a service are addressable
// (resolve in Consul DNS) or functional (also pass health and accept TCP).
package blocker
