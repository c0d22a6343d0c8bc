// Special functions the variational-Bayes truth models (ibcc, ebcc) need.
// Pure functions; thread-safe.

#ifndef VERITY_MODELS_SPECIAL_FUNCTIONS_H_
#define VERITY_MODELS_SPECIAL_FUNCTIONS_H_

namespace verity::models {

// The digamma function psi(x) = d/dx ln Gamma(x) for x > 0, to about 1e-13
// relative error: the recurrence psi(x) = psi(x + 1) - 1/x up to x >= 10, then
// the asymptotic series. NaN for x <= 0 or NaN (the models never pass them:
// their Dirichlet parameters are prior pseudo-counts > 0 plus counts >= 0).
double Digamma(double x);

}  // namespace verity::models

#endif  // VERITY_MODELS_SPECIAL_FUNCTIONS_H_
