/* tw_check.h — typed test asserts shared by the tests (cmocka must be included first). */
#ifndef TWELL_TW_CHECK_H
#define TWELL_TW_CHECK_H

/* Fails the current test, printing both values, unless val <= tol (NaN fails). */
#define CHECK_LE(val, tol, ...)                                                                    \
    do {                                                                                           \
        double v_ = (val), t_ = (tol);                                                             \
        if (!(v_ <= t_)) {                                                                         \
            print_error(__VA_ARGS__);                                                              \
            print_error(": %.6g > tolerance %.6g\n", v_, t_);                                      \
            fail();                                                                                \
        }                                                                                          \
    } while (0)

#endif
