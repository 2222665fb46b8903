// Package reaper keeps every role at its desired count of healthy, young
// machines through OpenStack Nova, under a Consul session lock.
package reaper
