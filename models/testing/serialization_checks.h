// The serialisation contract a classical truth model keeps (models/truth_model.h), checked
// once for every model test.
#ifndef VERITY_MODELS_TESTING_SERIALIZATION_CHECKS_H_
#define VERITY_MODELS_TESTING_SERIALIZATION_CHECKS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "models/annotation_matrix.h"
#include "models/truth_model.h"

namespace verity::models::testing {

// `fitted`'s blob, restored into `restored` (an empty model of the same method and classes),
// gives identical posteriors on `data`, identical confusions for annotators -1 to
// max_annotator, and the same blob again; then `restored` refuses a blob with a flipped byte, a
// truncated blob and a majority-vote blob (naming the "method"), and `other_classes` (the same
// method with another number of classes) refuses the blob, naming the "classes", and stays
// without parameters; `restored` also refuses the blob with 8 trailing payload bytes under a valid
// checksum (WithTrailingBytes), and a Clone() of `fitted` (a deep copy, truth_model.h) serializes
// to the same blob and gives the same posteriors. GoogleTest expectations: failures are
// reported, not returned.
void ExpectSerializeRestoreContract(const TruthModel& fitted, TruthModel& restored,
                                    TruthModel& other_classes, const AnnotationMatrix& data,
                                    int32_t max_annotator);

// `blob` (a ByteWriter blob) with 8 zero bytes appended to its payload and the checksum
// recomputed: a blob that ByteReader::Open accepts but that has trailing bytes after the model.
std::string WithTrailingBytes(std::string_view blob);

}  // namespace verity::models::testing

#endif  // VERITY_MODELS_TESTING_SERIALIZATION_CHECKS_H_
