/*
 * WEAVE_API marks the functions of weave's public headers: the shared library is built with hidden
 * visibility, so these are the only symbols it exports.
 */
#ifndef WEAVE_API_H
#define WEAVE_API_H

#if defined(__GNUC__) || defined(__clang__)
#define WEAVE_API __attribute__((visibility("default")))
#else
#define WEAVE_API
#endif

#endif /* WEAVE_API_H */
