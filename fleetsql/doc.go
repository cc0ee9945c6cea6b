// Package fleetsql is fleet's transactional outbox.
package fleetsql
