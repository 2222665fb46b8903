// Package nova is the reaper's reaper.Cloud on OpenStack Nova, through
// gophercloud; credentials come as the openstack CLI takes them.
package nova
