// Package kong is a small client for the Kong Gateway 3.x Admin API: the
// upstreams, targets, services and routes that TideGPU keeps in front of a
// pool. It is written here because github.com/kong/go-kong is not served by
// the module proxy this project builds from; it covers only what the Kong
// registrar needs and follows the documented behaviour of the Admin API:
//
//   - Entities are addressed by name or id; targets by id or host:port under
//     /upstreams/{upstream}/targets.
//   - Targets are created with POST; since Kong 3.0 a POST of a target that
//     already exists answers 409 (Kong/kong#8798), and an existing target is
//     updated with PATCH. PUT is documented as an upsert, but Kong answers 404
//     for a target that does not exist (Kong/kong#12987), so it is not used.
//   - Lists are paginated: size (default 100, max 1000) and an opaque offset;
//     a page carries "offset" and "next" until the last one, whose "next" is
//     null. The "next" link of a nested list (/upstreams/{u}/targets) carries
//     neither size nor tags, so the client rebuilds its own query from the
//     offset instead of following the link blindly.
//   - Tags mark what TideGPU owns. The tags filter (?tags=a,b means a AND b)
//     works on top-level lists only: Kong ignores it on nested lists such as
//     targets, and the filter syntax accepts only [A-Za-z0-9._~-]. The client
//     therefore always checks tags itself as well.
//   - Errors: 404 not found, 409 unique violation, 400 schema violation,
//     401/403 when RBAC is on and the Kong-Admin-Token header is missing or
//     wrong. They surface as *APIError; transport failures as *TransportError.
//
// The admin token is sent as the Kong-Admin-Token header and never appears in
// errors or String output.
package kong
