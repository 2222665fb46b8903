// Package hiera is the data model of Puppet's hiera data rendered from the
// Consul catalog (services.yaml and dependency state) and its rendering.
//
// Data and EncodeKeys turn instances into hiera keys. A Renderer renders a
// consul-template template whose functions (Funcs) collect the catalog into
// that model, and hands every complete render to a Sink, which says whether
// the data changed; it writes no file and runs no command itself. Run is the
// hiera-services command: it gives the renderer a FileSink for --out and
// runs --exec after each change.
package hiera
