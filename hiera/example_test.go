package hiera_test

import (
	"fmt"

	"github.com/jiocloud/orchestrate/hiera"
)

// Data turns instances into hiera keys: lists sorted and deduplicated,
// healthy_services holding passing instances only, every string quoted.
func ExampleData_YAML() {
	deps, _ := hiera.ParseDependencies([]byte("mysql: {addressable: 2, functional: 2}\n"))
	d := hiera.NewData(deps)
	d.AddService("mysql", []hiera.Instance{
		{Node: "db2", Address: "10.0.0.6", Port: 3306, Status: "warning", TaggedAddresses: map[string]string{"eth0": "10.1.0.6"}},
		{Node: "db1", Address: "10.0.0.5", Port: 3306, Status: "passing", TaggedAddresses: map[string]string{"eth0": "10.1.0.5"}},
	})
	out, _ := d.YAML()
	fmt.Print(string(out))
	// Output:
	// "healthy_services::mysql::address": ["10.0.0.5"]
	// "healthy_services::mysql::eth0": ["10.1.0.5"]
	// "healthy_services::mysql::nodes": ["db1"]
	// "healthy_services::mysql::port": [3306]
	// "orchestrate::dependencies::mysql::addressable": 2
	// "orchestrate::dependencies::mysql::addressable_required": 2
	// "orchestrate::dependencies::mysql::functional": 1
	// "orchestrate::dependencies::mysql::functional_required": 2
	// "orchestrate::dependencies_met": false
	// "orchestrate::unmet_dependencies": ["mysql"]
	// "services::mysql::address": ["10.0.0.5", "10.0.0.6"]
	// "services::mysql::eth0": ["10.1.0.5", "10.1.0.6"]
	// "services::mysql::nodes": ["db1", "db2"]
	// "services::mysql::port": [3306]
}

func ExampleYAMLQuote() {
	for _, s := range []string{"10.0.0.5", "yes", "a: b\n- c", "%{lookup('secret')}"} {
		fmt.Println(hiera.YAMLQuote(s))
	}
	// Output:
	// "10.0.0.5"
	// "yes"
	// "a: b\n- c"
	// "%{literal('%')}{lookup('secret')}"
}
