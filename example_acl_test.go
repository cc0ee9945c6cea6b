package fleet_test

import (
	"fmt"
	"strings"

	"github.com/fleet-go/fleet"
)

// The ACL rules of a tenant's workers: run them, after "ACL SETUSER <user>
// on ><password>", on every node (fleetctl acl prints the line).
func ExampleACLRules() {
	rules, err := fleet.ACLRules("tenant1:", fleet.ACLWorker)
	if err != nil {
		panic(err)
	}
	fmt.Println(rules[:3], rules[len(rules)-2:])
	fmt.Println(strings.Contains(strings.Join(rules, " "), "+flushall"))

	_, err = fleet.ACLRules("tenant*", fleet.ACLWorker)
	fmt.Println(err)
	// Output:
	// [resetkeys resetchannels -@all] [~tenant1:* &tenant1:*]
	// false
	// fleet: invalid argument: prefix "tenant*" holds a glob character (* ? [ ] \), which an ACL key pattern would read as a pattern
}
