// Package reduce folds the results of a job's tasks into the job's one
// result: the reducers a job names in its "reduce" policy, and the
// Registry that holds them by name.
//
// NewRegistry returns a registry of the built-in reducers. A program that
// embeds the server registers its own reducers in one and gives that same
// registry to the API, which refuses a job naming a reducer the registry
// does not hold, and to the aggregator, which runs the reducer when the
// job closes. A job that names no reducer is reduced by Default.
//
// # What a reducer is given
//
// Registry.Reduce makes a fresh Reducer with its Factory for each job and
// calls its Add once per task of the job, in increasing task id order,
// then its Result once. A failed task arrives as failed=true with a nil
// result, whatever the store kept for it. A completed task arrives with
// the result the store kept for it, which Reduce does not check: the
// reducer decides what it accepts. The result bytes are only valid during
// the call.
//
// # What a reducer promises
//
//   - It streams: it holds the output it is building, never the results it
//     has read, so that a job of a million tasks reduces in the memory of
//     its output.
//   - Its Result is one valid JSON document. Reduce checks a custom
//     reducer's document and fails the reduction when it is not JSON.
//   - It refuses a result it cannot fold by returning an error from Add,
//     saying why. Reduce then stops, and the error it returns is a *Error
//     naming the task; the aggregator fails the job with it.
//
// # Built-in reducers
//
//   - collect (the Default): a JSON array with one element per task, in
//     task order, null where the task failed. Each result is validated
//     and compacted.
//   - sum: the sum of the results, a JSON number; 0 when there are none.
//     It is exact while every result is an integer literal, however large,
//     and a float64 once any has a fraction or an exponent.
//   - concat: array results joined into one array, or string results into
//     one string; [] when there are none. Mixing the two is an error.
//   - merge: objects of numbers summed key by key, exactly as sum adds,
//     into one object with sorted keys; {} when there are none.
//   - none: null, whatever the results.
//
// sum, concat and merge skip failed tasks; concat and merge skip null
// results too, while sum refuses them like any other non-number. Every
// output is UTF-8: invalid UTF-8 inside a result's strings becomes U+FFFD.
package reduce
